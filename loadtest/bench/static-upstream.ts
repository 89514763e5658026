/**
 * A zero-latency, near-zero-cost OpenAI-shaped upstream: the baseline of bench:overhead.
 *
 *   node --import tsx bench/static-upstream.ts [--port N] [--model NAME]
 *
 * It answers like vLLM's OpenAI server (the chunk shapes of apps/vllm-sim/src/format.ts)
 * but does no work per token: every response body is built once per (endpoint, tokens,
 * include_usage) and kept, so a request costs reading and JSON.parse-ing its small body
 * plus one write. A stream is sent whole with one res.end() (at zero latency every chunk is
 * ready at once), chunked like vLLM's; a plain answer has a content-length.
 * - POST /v1/chat/completions, /v1/completions: N = max_tokens (default 16) tokens of
 *   " tok"; with "stream": true, text/event-stream: the role chunk (chat only), N content
 *   chunks (the last with finish_reason "length"), with stream_options.include_usage every
 *   chunk carries "usage": null and a usage chunk (choices: []) comes before
 *   `data: [DONE]`. Usage: prompt_tokens is a constant (PROMPT_TOKENS), as are the id and
 *   created time of every response (vLLM's are per request; nothing downstream reads them).
 * - GET /health: 200; GET /v1/models: the model list; GET /metrics: vLLM's three load
 *   gauges at 0 (an idle pod: the gateway's pod scraper sees a fresh, unloaded pod, as
 *   with the sim at zero latency, rather than a never-scraped one, which counts as
 *   saturated); anything else 404.
 *
 * Port: --port or STATIC_UPSTREAM_PORT, else a free one. Once listening it prints
 * `static-upstream listening on http://127.0.0.1:<port>` on stdout. It exits on SIGTERM and
 * SIGINT, and when its stdin ends if FAIRGATE_EXIT_WITH_STDIN=1 (testkit's spawnManaged
 * with exitWithStdin), so it never outlives the bench that started it.
 *
 * It imports nothing that works per request (node:http, and bench-server.ts to listen and
 * stop): run as its own process, its CPU is measured apart from the load client and the
 * gateway.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { flag, serveBenchHttp } from './bench-server.js';

const PROMPT_TOKENS = 7;
const DEFAULT_MAX_TOKENS = 16;
const MAX_TOKENS_LIMIT = 65_536;
/** Distinct (endpoint, tokens, include_usage) bodies kept; the oldest goes first. */
const CACHE_LIMIT = 256;
const TOKEN_TEXT = ' tok';

const MODEL = flag('model') ?? 'sim-model';
const PORT = Number(flag('port') ?? process.env.STATIC_UPSTREAM_PORT ?? 0);
const CREATED = Math.floor(Date.now() / 1000);

type Endpoint = 'chat' | 'completions';

function usage(tokens: number) {
  return {
    prompt_tokens: PROMPT_TOKENS,
    completion_tokens: tokens,
    total_tokens: PROMPT_TOKENS + tokens,
  };
}

/** The whole SSE body of a stream of `tokens` content chunks. */
function streamBody(endpoint: Endpoint, tokens: number, includeUsage: boolean): Buffer {
  const chat = endpoint === 'chat';
  const base = {
    id: chat ? 'chatcmpl-static' : 'cmpl-static',
    object: chat ? 'chat.completion.chunk' : 'text_completion',
    created: CREATED,
    model: MODEL,
  };
  const withUsage = <T extends object>(chunk: T) =>
    includeUsage ? { ...chunk, usage: null } : chunk;
  const event = (chunk: object) => `data: ${JSON.stringify(chunk)}\n\n`;
  const parts: string[] = [];
  if (chat) {
    parts.push(
      event(
        withUsage({
          ...base,
          choices: [
            {
              index: 0,
              delta: { role: 'assistant', content: '' },
              logprobs: null,
              finish_reason: null,
            },
          ],
        }),
      ),
    );
  }
  const content = (finish: 'length' | null) =>
    event(
      withUsage({
        ...base,
        choices: [
          chat
            ? { index: 0, delta: { content: TOKEN_TEXT }, logprobs: null, finish_reason: finish }
            : { index: 0, text: TOKEN_TEXT, logprobs: null, finish_reason: finish },
        ],
      }),
    );
  if (tokens > 0) parts.push(content(null).repeat(tokens - 1), content('length'));
  if (includeUsage) parts.push(event({ ...base, choices: [], usage: usage(tokens) }));
  parts.push('data: [DONE]\n\n');
  return Buffer.from(parts.join(''));
}

/** The JSON body of a non-streamed answer of `tokens` tokens. */
function plainBody(endpoint: Endpoint, tokens: number): Buffer {
  const text = TOKEN_TEXT.repeat(tokens);
  const body =
    endpoint === 'chat'
      ? {
          id: 'chatcmpl-static',
          object: 'chat.completion',
          created: CREATED,
          model: MODEL,
          choices: [
            {
              index: 0,
              message: { role: 'assistant', content: text },
              logprobs: null,
              finish_reason: 'length',
            },
          ],
          usage: usage(tokens),
        }
      : {
          id: 'cmpl-static',
          object: 'text_completion',
          created: CREATED,
          model: MODEL,
          choices: [{ index: 0, text, logprobs: null, finish_reason: 'length' }],
          usage: usage(tokens),
        };
  return Buffer.from(JSON.stringify(body));
}

const bodies = new Map<string, Buffer>();
function cachedBody(endpoint: Endpoint, stream: boolean, tokens: number, includeUsage: boolean) {
  const key = `${endpoint}:${stream ? 's' : 'p'}:${tokens}:${includeUsage ? 'u' : ''}`;
  let body = bodies.get(key);
  if (body === undefined) {
    body = stream ? streamBody(endpoint, tokens, includeUsage) : plainBody(endpoint, tokens);
    if (bodies.size >= CACHE_LIMIT) bodies.delete(bodies.keys().next().value as string);
    bodies.set(key, body);
  }
  return body;
}

const JSON_HEADERS = { 'content-type': 'application/json' };
const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
};
const MODELS = Buffer.from(
  JSON.stringify({
    object: 'list',
    data: [
      {
        id: MODEL,
        object: 'model',
        created: CREATED,
        owned_by: 'vllm',
        root: MODEL,
        parent: null,
        max_model_len: 4096,
      },
    ],
  }),
);
const METRICS = Buffer.from(
  ['vllm:num_requests_running', 'vllm:num_requests_waiting', 'vllm:kv_cache_usage_perc']
    .map((name) => `${name}{model_name="${MODEL}"} 0\n`)
    .join(''),
);

function sendJson(res: ServerResponse, status: number, body: Buffer | string): void {
  res.writeHead(status, { ...JSON_HEADERS, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

function sendError(res: ServerResponse, status: number, message: string): void {
  const type = status === 404 ? 'NotFoundError' : 'BadRequestError';
  sendJson(
    res,
    status,
    JSON.stringify({ object: 'error', message, type, param: null, code: status }),
  );
}

interface CompletionRequest {
  max_tokens?: unknown;
  max_completion_tokens?: unknown;
  stream?: unknown;
  stream_options?: { include_usage?: unknown } | null;
}

function answer(endpoint: Endpoint, raw: string, res: ServerResponse): void {
  let request: CompletionRequest;
  try {
    request = JSON.parse(raw) as CompletionRequest;
  } catch {
    sendError(res, 400, 'The request body is not valid JSON.');
    return;
  }
  if (typeof request !== 'object' || request === null) {
    sendError(res, 400, 'The request body must be a JSON object.');
    return;
  }
  const asked = request.max_tokens ?? request.max_completion_tokens ?? DEFAULT_MAX_TOKENS;
  if (!Number.isInteger(asked) || (asked as number) < 1 || (asked as number) > MAX_TOKENS_LIMIT) {
    sendError(res, 400, `max_tokens must be an integer in 1..${MAX_TOKENS_LIMIT}.`);
    return;
  }
  const tokens = asked as number;
  if (request.stream === true) {
    const includeUsage = request.stream_options?.include_usage === true;
    // No content-length: chunked, as vLLM streams (one chunk here: the whole stream).
    res.writeHead(200, SSE_HEADERS);
    res.end(cachedBody(endpoint, true, tokens, includeUsage));
    return;
  }
  sendJson(res, 200, cachedBody(endpoint, false, tokens, false));
}

function handle(req: IncomingMessage, res: ServerResponse): void {
  const url = req.url ?? '/';
  if (req.method === 'POST') {
    const endpoint: Endpoint | undefined =
      url === '/v1/chat/completions'
        ? 'chat'
        : url === '/v1/completions'
          ? 'completions'
          : undefined;
    if (endpoint === undefined) {
      req.resume();
      sendError(res, 404, `Not found: POST ${url}`);
      return;
    }
    let raw = '';
    req.setEncoding('utf8');
    req.on('data', (text: string) => {
      raw += text;
    });
    req.on('end', () => answer(endpoint, raw, res));
    return;
  }
  if (req.method === 'GET' || req.method === 'HEAD') {
    if (url === '/health') {
      res.writeHead(200, { 'content-length': 0 });
      res.end();
      return;
    }
    if (url === '/v1/models') {
      sendJson(res, 200, MODELS);
      return;
    }
    if (url === '/metrics') {
      res.writeHead(200, {
        'content-type': 'text/plain; version=0.0.4; charset=utf-8',
        'content-length': METRICS.length,
      });
      res.end(METRICS);
      return;
    }
  }
  req.resume();
  sendError(res, 404, `Not found: ${req.method} ${url}`);
}

serveBenchHttp('static-upstream', PORT, handle);
