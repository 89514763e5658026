/**
 * A zero-latency, near-zero-cost OpenAI-shaped upstream, the baseline of bench:overhead, run as
 * its own process (stack.ts) so its CPU is measured apart. It answers like vLLM (the chunk
 * shapes of apps/vllm-sim/src/format.ts) with each body built once and kept: a request costs
 * parsing its body plus one write. POST /v1/chat/completions: max_tokens (16) tokens of " tok";
 * a stream is the role chunk, one chunk per token (and a usage chunk with include_usage; with
 * continuous_usage_stats too, every chunk carries the usage so far, as the gateway asks) and
 * `data: [DONE]`, sent with one end(). GET /health, /v1/models, and /metrics with vLLM's load
 * gauges at 0 (an idle pod). --port (else a free one); once listening it prints
 * `static-upstream listening on <url>`; it exits on SIGTERM, SIGINT or the end of its stdin.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { onShutdownRequest } from '@fairgate/runtime';

const MODEL = 'sim-model';
const PROMPT_TOKENS = 7;
const MAX_TOKENS_LIMIT = 65_536;
/** Distinct bodies kept; the oldest goes first. */
const CACHE_LIMIT = 256;
const TOKEN = ' tok';
const CREATED = Math.floor(Date.now() / 1000);
const portAt = process.argv.indexOf('--port');
const PORT = portAt >= 0 ? Number(process.argv[portAt + 1]) : 0;

const usage = (tokens: number) => ({
  prompt_tokens: PROMPT_TOKENS,
  completion_tokens: tokens,
  total_tokens: PROMPT_TOKENS + tokens,
});
/** The usage so far on a chunk (continuous_usage_stats), in vLLM's field order. */
const usageSoFar = (tokens: number) => ({
  prompt_tokens: PROMPT_TOKENS,
  total_tokens: PROMPT_TOKENS + tokens,
  completion_tokens: tokens,
});
const base = { id: 'chatcmpl-static', created: CREATED, model: MODEL };

function streamBody(tokens: number, includeUsage: boolean, continuous: boolean): Buffer {
  const event = (choices: object[], generated: number) =>
    `data: ${JSON.stringify({
      ...base,
      object: 'chat.completion.chunk',
      choices,
      ...(includeUsage ? { usage: continuous ? usageSoFar(generated) : null } : {}),
    })}\n\n`;
  const choice = (delta: object, finish: 'length' | null) => ({
    index: 0,
    delta,
    logprobs: null,
    finish_reason: finish,
  });
  const parts = [event([choice({ role: 'assistant', content: '' }, null)], 0)];
  for (let n = 1; n <= tokens; n++) {
    parts.push(event([choice({ content: TOKEN }, n === tokens ? 'length' : null)], n));
  }
  if (includeUsage) {
    parts.push(
      `data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices: [], usage: usage(tokens) })}\n\n`,
    );
  }
  parts.push('data: [DONE]\n\n');
  return Buffer.from(parts.join(''));
}

function plainBody(tokens: number): Buffer {
  const message = { role: 'assistant', content: TOKEN.repeat(tokens) };
  const choices = [{ index: 0, message, logprobs: null, finish_reason: 'length' }];
  return Buffer.from(
    JSON.stringify({ ...base, object: 'chat.completion', choices, usage: usage(tokens) }),
  );
}

const bodies = new Map<string, Buffer>();
function cachedBody(
  stream: boolean,
  tokens: number,
  includeUsage: boolean,
  continuous = false,
): Buffer {
  const key = `${stream ? 's' : 'p'}:${tokens}:${includeUsage ? 'u' : ''}${continuous ? 'c' : ''}`;
  let body = bodies.get(key);
  if (body === undefined) {
    body = stream ? streamBody(tokens, includeUsage, continuous) : plainBody(tokens);
    if (bodies.size >= CACHE_LIMIT) bodies.delete(bodies.keys().next().value as string);
    bodies.set(key, body);
  }
  return body;
}

const METRICS = Buffer.from(
  ['vllm:num_requests_running', 'vllm:num_requests_waiting', 'vllm:kv_cache_usage_perc']
    .map((name) => `${name}{model_name="${MODEL}"} 0\n`)
    .join(''),
);

const MODELS = JSON.stringify({
  object: 'list',
  data: [{ id: MODEL, object: 'model', created: CREATED, owned_by: 'vllm', max_model_len: 4096 }],
});

function send(res: ServerResponse, status: number, body: Buffer | string, type: string): void {
  res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

interface CompletionRequest {
  max_tokens?: unknown;
  stream?: unknown;
  stream_options?: { include_usage?: unknown; continuous_usage_stats?: unknown } | null;
}

/** The answer to a chat completion: max_tokens (default 16) tokens, streamed or not. */
function answer(raw: string, res: ServerResponse): void {
  let request: CompletionRequest;
  try {
    request = JSON.parse(raw) as CompletionRequest;
  } catch {
    send(
      res,
      400,
      '{"object":"error","message":"The body is not valid JSON."}',
      'application/json',
    );
    return;
  }
  const asked = Number(request?.max_tokens ?? 16);
  const tokens = Number.isInteger(asked) ? Math.min(Math.max(asked, 1), MAX_TOKENS_LIMIT) : 16;
  if (request.stream !== true) {
    send(res, 200, cachedBody(false, tokens, false), 'application/json');
    return;
  }
  const includeUsage = request.stream_options?.include_usage === true;
  const continuous = includeUsage && request.stream_options?.continuous_usage_stats === true;
  res.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
  });
  res.end(cachedBody(true, tokens, includeUsage, continuous));
}

function handle(req: IncomingMessage, res: ServerResponse): void {
  if (req.method === 'POST' && req.url === '/v1/chat/completions') {
    let raw = '';
    req.setEncoding('utf8');
    req.on('data', (text: string) => {
      raw += text;
    });
    req.on('end', () => answer(raw, res));
    return;
  }
  req.resume();
  if (req.method === 'GET' && req.url === '/health') send(res, 200, '', 'text/plain');
  else if (req.method === 'GET' && req.url === '/v1/models')
    send(res, 200, MODELS, 'application/json');
  else if (req.method === 'GET' && req.url === '/metrics') send(res, 200, METRICS, 'text/plain');
  else send(res, 404, `Not found: ${req.method} ${req.url}`, 'text/plain');
}

const server = createServer({ keepAliveTimeout: 60_000 }, handle);
server.once('error', (error) => {
  process.stderr.write(`static-upstream: ${error.message}\n`);
  process.exit(1);
});
server.listen(PORT, '127.0.0.1', () => {
  const address = server.address();
  const bound = typeof address === 'object' && address ? address.port : PORT;
  process.stdout.write(`static-upstream listening on http://127.0.0.1:${bound}\n`);
});
onShutdownRequest(() => {
  server.close(() => process.exit(0));
  server.closeAllConnections();
  setTimeout(() => process.exit(0), 1_000).unref();
});
