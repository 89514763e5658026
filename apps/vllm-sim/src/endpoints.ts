/**
 * Every route the sim serves, with what it answers and what it costs on the engine: the one
 * table docs/sim.md's endpoint table is checked against (test/endpoints-table.test.ts), and
 * the server's routes too.
 */
export interface SimEndpoint {
  method: 'GET' | 'POST';
  paths: readonly string[];
  answers: string;
  cost: string;
  /** Its requests run on the engine: each counts in /debug/stats and /debug/requests. */
  engine?: true;
}

const PREFILL = 'one prefill-only sequence per input: alpha + (beta+gamma) * its tokens alone';

export const SIM_ENDPOINTS: readonly SimEndpoint[] = [
  {
    method: 'POST',
    paths: ['/v1/chat/completions', '/v1/completions'],
    answers: 'chat / text completions, streaming or not',
    cost: 'prefill of the prompt, then one decode step per token',
    engine: true,
  },
  {
    method: 'POST',
    paths: ['/v1/responses'],
    answers: "Responses API, streaming (vLLM's events) or not",
    cost: 'as chat: the input rendered as a chat prompt',
    engine: true,
  },
  {
    method: 'POST',
    paths: ['/v1/embeddings'],
    answers: 'one hashed unit vector per input (float or base64)',
    cost: PREFILL,
    engine: true,
  },
  {
    method: 'POST',
    paths: ['/pooling'],
    answers: 'the same vectors as `data`',
    cost: PREFILL,
    engine: true,
  },
  {
    method: 'POST',
    paths: ['/score', '/v1/score'],
    answers: 'a score in [0, 1] per (text_1, text_2) pair',
    cost: 'one prefill-only sequence per pair, of both texts',
    engine: true,
  },
  {
    method: 'POST',
    paths: ['/rerank', '/v1/rerank', '/v2/rerank'],
    answers: 'documents by relevance to the query, top_n kept',
    cost: 'one prefill-only sequence per (query, document)',
    engine: true,
  },
  {
    method: 'POST',
    paths: ['/v1/audio/transcriptions', '/v1/audio/translations'],
    answers: 'pseudo-text for a multipart audio upload',
    cost: 'per 30 s window: prefill of its audio tokens, one text token per 16',
    engine: true,
  },
  {
    method: 'POST',
    paths: ['/tokenize', '/detokenize'],
    answers: 'token ids of the shared estimate, and back',
    cost: 'none (API server, no engine)',
  },
  {
    method: 'POST',
    paths: ['/v1/load_lora_adapter', '/v1/unload_lora_adapter'],
    answers: 'LoRA adapter loads and unloads (with --max-loras only)',
    cost: '--lora-load-ms for a load',
  },
  { method: 'GET', paths: ['/v1/models'], answers: "vLLM's model list", cost: 'none' },
  { method: 'GET', paths: ['/health'], answers: '200, empty', cost: 'none' },
  { method: 'GET', paths: ['/metrics'], answers: 'Prometheus text', cost: 'none' },
  {
    method: 'GET',
    paths: ['/debug/last-traceparent', '/debug/stats', '/debug/requests'],
    answers: "the sim's debug views",
    cost: 'none',
  },
];
