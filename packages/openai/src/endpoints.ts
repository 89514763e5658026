import type { z } from 'zod';
import {
  audioRequestSchema,
  detokenizeRequestSchema,
  embeddingRequestSchema,
  estimateInputTokens,
  poolingRequestSchema,
  rerankRequestSchema,
  scoreRequestSchema,
  tokenizeRequestSchema,
} from './pooling.js';
import {
  chatCompletionRequestSchema,
  completionRequestSchema,
  type Endpoint,
  type GenerationRequest,
} from './requests.js';
import { type ResponsesRequest, responsesAsChat, responsesRequestSchema } from './responses-api.js';
import { estimatePromptTokens } from './tokens.js';

/** Every endpoint of vLLM's OpenAI-compatible server the gateway serves. */
export type ApiEndpoint =
  | Endpoint
  | 'responses'
  | 'embeddings'
  | 'pooling'
  | 'rerank'
  | 'score'
  | 'transcriptions'
  | 'translations'
  | 'tokenize'
  | 'detokenize';

/**
 * How the gateway serves an endpoint:
 * - `generation`: scheduled (a slot), streamed or not, prefix keys, `max_tokens` of output;
 * - `prefill`: scheduled (a slot), one JSON answer, input tokens only (no output);
 * - `upload`: a slot, as a prefill; the body is a multipart upload (audio), written to a
 *   file as it arrives and sent to the pod from there, never held in memory;
 * - `direct`: no slot: the tokenizer's answer, forwarded at once to a healthy pod of the
 *   model's pool, after authentication.
 */
export type EndpointKind = 'generation' | 'prefill' | 'upload' | 'direct';

/** A validated request body: the fields the gateway reads, every other field kept. */
export type ApiRequest = { model: string } & Record<string, unknown>;

/** How a generation's stream is framed: chat chunks ending in `[DONE]`, or Responses events. */
export type StreamDialect = 'chat' | 'responses';

export interface EndpointSpec {
  readonly endpoint: ApiEndpoint;
  readonly kind: EndpointKind;
  /** A generation: its stream's dialect. */
  readonly dialect?: StreamDialect;
  /**
   * A generation: the chat or text completion request it amounts to (its prompt, output
   * limit and `stream`), which the gateway estimates, routes by prefix and reads.
   */
  asGeneration?(request: ApiRequest): GenerationRequest;
  /** The path the pod serves it at (the request is forwarded there). */
  readonly path: string;
  /** Other paths vLLM serves the same endpoint at; the gateway serves them too. */
  readonly aliases: readonly string[];
  /** Its spans' `gen_ai.operation.name` (OpenTelemetry GenAI conventions). */
  readonly operation: string;
  readonly schema: z.ZodType<ApiRequest>;
  /** Estimated input tokens of a validated request. */
  inputTokens(request: ApiRequest): number;
  /** Estimated output tokens of a request that is not a generation (absent: none). */
  outputTokens?(request: ApiRequest): number;
  /** Whether the pod answers the request as a stream (SSE). */
  streams(request: ApiRequest): boolean;
  /**
   * What usage the client asked of a stream (chat and completions: `stream_options`; audio:
   * vLLM's form fields); absent where the stream always carries it (Responses).
   */
  streamUsage?(request: ApiRequest): { include: boolean; continuous: boolean };
}

const bodyStreams = (request: ApiRequest) => request.stream === true;
const never = () => false;

/** `stream_options` of a chat or completion request. */
function streamOptionsUsage(request: ApiRequest): { include: boolean; continuous: boolean } {
  const options = (request as unknown as GenerationRequest).stream_options;
  return {
    include: options?.include_usage === true,
    continuous: options?.continuous_usage_stats === true,
  };
}

/** A boolean form field as vLLM (pydantic) reads one: true, 1, yes or on. */
export function formBoolean(value: unknown): boolean {
  return typeof value === 'string' && /^(true|1|yes|on)$/i.test(value.trim());
}

const asItself = (request: ApiRequest) => request as unknown as GenerationRequest;

const generationTokens = (request: ApiRequest) => estimatePromptTokens(asItself(request));

/** Input tokens of a prefill-only request: its `input` or `messages`. */
const pooledTokens = (request: ApiRequest) =>
  estimateInputTokens(request.input ?? request.messages);

/**
 * Input tokens of a scoring request: each of `many` is scored in a pair with `one` (the
 * query, or text_1), so a single `one` is in every pair's prefill; a list is paired item
 * for item.
 */
const pairedTokens = (one: unknown, many: unknown) =>
  estimateInputTokens(one) * (Array.isArray(one) || !Array.isArray(many) ? 1 : many.length) +
  estimateInputTokens(many);

const schema = (s: z.ZodType) => s as z.ZodType<ApiRequest>;

/** Encoder tokens a second of audio makes (Whisper). */
export const AUDIO_TOKENS_PER_SECOND = 50;
/** Audio bytes per encoder token: a second of 16 kHz 16-bit mono audio is 32,000 bytes. */
export const AUDIO_BYTES_PER_TOKEN = 32_000 / AUDIO_TOKENS_PER_SECOND;
/** Text tokens a transcription makes per audio token, roughly. */
const AUDIO_TOKENS_PER_TEXT_TOKEN = 16;

const audioTokens = (r: ApiRequest) =>
  Math.ceil((r.file as { bytes: number }).bytes / AUDIO_BYTES_PER_TOKEN);

/** `/v1/audio/<endpoint>`: an audio upload, its tokens from the file's size. */
function audioUpload(endpoint: 'transcriptions' | 'translations', operation: string): EndpointSpec {
  return {
    endpoint,
    kind: 'upload',
    path: `/v1/audio/${endpoint}`,
    aliases: [],
    operation,
    schema: schema(audioRequestSchema),
    inputTokens: audioTokens,
    outputTokens: (r) => Math.ceil(audioTokens(r) / AUDIO_TOKENS_PER_TEXT_TOKEN),
    // vLLM's form fields: `stream`, `stream_include_usage`, `stream_continuous_usage_stats`.
    streams: (r) => formBoolean(r.stream),
    streamUsage: (r) => ({
      include: formBoolean(r.stream_include_usage),
      continuous: formBoolean(r.stream_continuous_usage_stats),
    }),
  };
}

/**
 * The endpoint table (docs/gateway.md, *Endpoints*): the one place that says how each
 * endpoint is validated, estimated and scheduled.
 */
export const ENDPOINTS: Readonly<Record<ApiEndpoint, EndpointSpec>> = {
  chat: {
    endpoint: 'chat',
    kind: 'generation',
    dialect: 'chat',
    asGeneration: asItself,
    streams: bodyStreams,
    streamUsage: streamOptionsUsage,
    path: '/v1/chat/completions',
    aliases: [],
    operation: 'chat',
    schema: schema(chatCompletionRequestSchema),
    inputTokens: generationTokens,
  },
  completions: {
    endpoint: 'completions',
    kind: 'generation',
    dialect: 'chat',
    asGeneration: asItself,
    streams: bodyStreams,
    streamUsage: streamOptionsUsage,
    path: '/v1/completions',
    aliases: [],
    operation: 'text_completion',
    schema: schema(completionRequestSchema),
    inputTokens: generationTokens,
  },
  responses: {
    endpoint: 'responses',
    kind: 'generation',
    dialect: 'responses',
    asGeneration: (r) => responsesAsChat(r as unknown as ResponsesRequest),
    streams: bodyStreams,
    path: '/v1/responses',
    aliases: [],
    operation: 'chat',
    schema: schema(responsesRequestSchema),
    inputTokens: (r) => estimatePromptTokens(responsesAsChat(r as unknown as ResponsesRequest)),
  },
  embeddings: {
    endpoint: 'embeddings',
    kind: 'prefill',
    path: '/v1/embeddings',
    aliases: [],
    operation: 'embeddings',
    schema: schema(embeddingRequestSchema),
    streams: never,
    inputTokens: pooledTokens,
  },
  pooling: {
    endpoint: 'pooling',
    kind: 'prefill',
    path: '/pooling',
    aliases: [],
    operation: 'pooling',
    schema: schema(poolingRequestSchema),
    streams: never,
    inputTokens: pooledTokens,
  },
  rerank: {
    endpoint: 'rerank',
    kind: 'prefill',
    path: '/v1/rerank',
    aliases: ['/rerank', '/v2/rerank'],
    operation: 'rerank',
    schema: schema(rerankRequestSchema),
    streams: never,
    inputTokens: (r) => pairedTokens(r.query, r.documents),
  },
  score: {
    endpoint: 'score',
    kind: 'prefill',
    path: '/v1/score',
    aliases: ['/score'],
    operation: 'score',
    schema: schema(scoreRequestSchema),
    streams: never,
    inputTokens: (r) => pairedTokens(r.text_1, r.text_2),
  },
  transcriptions: audioUpload('transcriptions', 'transcription'),
  translations: audioUpload('translations', 'translation'),
  tokenize: {
    endpoint: 'tokenize',
    kind: 'direct',
    path: '/tokenize',
    aliases: [],
    operation: 'tokenize',
    schema: schema(tokenizeRequestSchema),
    streams: never,
    inputTokens: (r) => estimateInputTokens(r.prompt ?? r.messages),
  },
  detokenize: {
    endpoint: 'detokenize',
    kind: 'direct',
    path: '/detokenize',
    aliases: [],
    operation: 'detokenize',
    schema: schema(detokenizeRequestSchema),
    streams: never,
    inputTokens: (r) => (r.tokens as unknown[]).length,
  },
};

/** The paths a Batch API batch may run (OpenAI's `endpoint`). */
export const BATCH_PATHS = [
  '/v1/chat/completions',
  '/v1/completions',
  '/v1/embeddings',
  '/v1/responses',
] as const;
export type BatchPath = (typeof BATCH_PATHS)[number];

/** The endpoint of a path of the table (its own path or an alias), undefined for none. */
export function endpointOfPath(path: string): EndpointSpec | undefined {
  return SPEC_OF_PATH.get(path);
}

const SPEC_OF_PATH = new Map<string, EndpointSpec>(
  Object.values(ENDPOINTS).flatMap((spec) =>
    [spec.path, ...spec.aliases].map((path): [string, EndpointSpec] => [path, spec]),
  ),
);
