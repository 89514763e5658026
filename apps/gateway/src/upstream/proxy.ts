import {
  createSseDecoder,
  encodeSseError,
  SSE_DONE,
  SSE_DONE_DATA,
  type Usage,
} from '@fairgate/openai';
import { type Dispatcher, errors as undiciErrors } from 'undici';
import { DrainAborted } from '../drain.js';
import { draining, noticeDrop, upstreamFailure } from '../errors.js';
import { EvictedError } from '../grants.js';
import type { PodState } from './pods.js';
import type { SlotAbort } from './slot-abort.js';

/**
 * One upstream exchange with a pod. The request body is forwarded with every
 * field the client sent (vLLM extras included); for streams
 * `stream_options.include_usage` is forced on so the gateway always learns the
 * actual usage, and the usage chunk is hidden again from clients that did not
 * ask for it.
 */
export interface UpstreamRequest {
  path: string;
  body: Record<string, unknown>;
  stream: boolean;
  headers: Record<string, string>;
  /** Aborted when the client goes away or the gateway evicts the request. */
  signal: SlotAbort;
}

export interface StreamEnd {
  outcome: 'completed' | 'upstream_error' | 'cancelled';
  usage: Usage | undefined;
  error?: Error;
}

export interface UpstreamHooks {
  /** t4: status and headers received. */
  onHeaders?: (status: number) => void;
  /** t5: the first chunk carrying content was handed to the client. */
  onFirstToken?: () => void;
}

export type UpstreamResponse =
  | { kind: 'json'; status: number; contentType: string; text: string; usage: Usage | undefined }
  | { kind: 'stream'; status: number; body: ReadableStream<Uint8Array>; end: Promise<StreamEnd> };

/** A failure before any byte reached the client: safe to retry on another pod. */
export class UpstreamUnavailable extends Error {
  constructor(
    message: string,
    readonly kind: 'connect' | 'timeout' | 'status' | 'reset',
    readonly status?: number,
  ) {
    super(message);
    this.name = 'UpstreamUnavailable';
  }
}

/** Body as sent upstream: usage always requested for streams. */
export function upstreamBody(request: UpstreamRequest): string {
  if (!request.stream) return JSON.stringify(request.body);
  const options = (request.body.stream_options ?? {}) as Record<string, unknown>;
  return JSON.stringify({ ...request.body, stream_options: { ...options, include_usage: true } });
}

function classify(error: unknown): UpstreamUnavailable {
  if (error instanceof UpstreamUnavailable) return error;
  const message = error instanceof Error ? error.message : String(error);
  if (
    error instanceof undiciErrors.HeadersTimeoutError ||
    error instanceof undiciErrors.ConnectTimeoutError
  ) {
    return new UpstreamUnavailable(`upstream timed out: ${message}`, 'timeout');
  }
  if (error instanceof undiciErrors.SocketError) {
    return new UpstreamUnavailable(`upstream connection reset: ${message}`, 'reset');
  }
  return new UpstreamUnavailable(`upstream unreachable: ${message}`, 'connect');
}

/** One request to `pod`: collected whole when not streaming, relayed event by event when it is. */
export function callUpstream(
  pod: PodState,
  request: UpstreamRequest,
  clientWantsUsage: boolean,
  hooks: UpstreamHooks = {},
): Promise<UpstreamResponse> {
  return request.stream
    ? callStream(pod, request, clientWantsUsage, hooks)
    : callJson(pod, request, hooks);
}

async function callStream(
  pod: PodState,
  request: UpstreamRequest,
  clientWantsUsage: boolean,
  hooks: UpstreamHooks,
): Promise<UpstreamResponse> {
  let response: Awaited<ReturnType<typeof pod.pool.request>>;
  try {
    response = await pod.pool.request({
      method: 'POST',
      path: request.path,
      headers: { 'content-type': 'application/json', ...request.headers },
      body: upstreamBody(request),
      signal: request.signal.webSignal(),
    });
  } catch (error) {
    if (request.signal.aborted) throw error;
    throw classify(error);
  }
  const status = response.statusCode;
  hooks.onHeaders?.(status);
  if (status >= 500 || status === 429) {
    // Read to the end (and ignored) so the keep-alive connection can be reused.
    await response.body.text().catch(() => '');
    throw new UpstreamUnavailable(
      `upstream ${pod.config.name} answered ${status}`,
      'status',
      status,
    );
  }
  const contentType = String(response.headers['content-type'] ?? 'application/json');
  if (status !== 200 || !contentType.includes('text/event-stream')) {
    let text: string;
    try {
      text = await response.body.text();
    } catch (error) {
      if (request.signal.aborted) throw error;
      throw classify(error);
    }
    hooks.onFirstToken?.();
    return {
      kind: 'json',
      status,
      contentType,
      text,
      usage: status === 200 ? usageOf(text) : undefined,
    };
  }
  return relayStream(response.body, request.signal, clientWantsUsage, hooks);
}

/**
 * A non-streaming exchange: the same contract as the `pool.request()` path
 * (statuses, retryable failures, abort by `request.signal`), but through
 * `pool.dispatch()` with a handler that collects the body into one buffer —
 * no Readable stream, async resource or body mixin per request, which costs
 * several percent of the gateway's CPU at this request size.
 */
async function callJson(
  pod: PodState,
  request: UpstreamRequest,
  hooks: UpstreamHooks,
): Promise<UpstreamResponse> {
  let collected: CollectedResponse;
  try {
    collected = await dispatchCollect(
      pod,
      {
        method: 'POST',
        path: request.path,
        headers: { 'content-type': 'application/json', ...request.headers },
        body: upstreamBody(request),
      },
      request.signal,
      hooks,
    );
  } catch (error) {
    if (request.signal.aborted) throw error;
    throw classify(error);
  }
  const { status, text } = collected;
  if (status >= 500 || status === 429) {
    throw new UpstreamUnavailable(
      `upstream ${pod.config.name} answered ${status}`,
      'status',
      status,
    );
  }
  hooks.onFirstToken?.();
  return {
    kind: 'json',
    status,
    contentType: collected.contentType,
    text,
    usage: status === 200 ? usageOf(text) : undefined,
  };
}

interface CollectedResponse {
  status: number;
  contentType: string;
  text: string;
}

/**
 * Sends one request and collects the whole response body as text. After an
 * error status (5xx, 429) a failed body read still resolves, with the text
 * read so far dropped, as `response.body.text().catch(() => '')` did.
 */
function dispatchCollect(
  pod: PodState,
  options: { method: 'POST'; path: string; headers: Record<string, string>; body: string },
  signal: SlotAbort,
  hooks: UpstreamHooks,
): Promise<CollectedResponse> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(signal.reason);
      return;
    }
    let controller: Dispatcher.DispatchController | undefined;
    let status = 0;
    let contentType = 'application/json';
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    const onAbort = () => controller?.abort(signal.reason as Error);
    const settle = () => {
      settled = true;
      signal.removeEventListener('abort', onAbort);
    };
    signal.addEventListener('abort', onAbort);
    const handler: Dispatcher.DispatchHandler = {
      onRequestStart(started) {
        controller = started;
        if (signal.aborted) started.abort(signal.reason as Error);
      },
      onResponseStart(_controller, statusCode, headers) {
        if (statusCode < 200) return; // 1xx: the final status follows
        status = statusCode;
        const type = headers['content-type'];
        if (type !== undefined) contentType = String(type);
        hooks.onHeaders?.(statusCode);
      },
      onResponseData(_controller, chunk) {
        chunks.push(chunk);
        size += chunk.length;
      },
      onResponseEnd() {
        if (settled) return;
        settle();
        resolve({ status, contentType, text: decodeUtf8(chunks, size) });
      },
      onResponseError(_controller, error) {
        if (settled) return;
        settle();
        if (status >= 500 || status === 429) resolve({ status, contentType, text: '' });
        else reject(error);
      },
    };
    pod.pool.dispatch(options, handler);
  });
}

/** UTF-8 text of the chunks, a leading BOM dropped (as undici's body.text()). */
function decodeUtf8(chunks: Buffer[], size: number): string {
  const buffer = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size);
  const bom = size >= 3 && buffer[0] === 0xef && buffer[1] === 0xbb && buffer[2] === 0xbf;
  return buffer.toString('utf8', bom ? 3 : 0, size);
}

/**
 * The `usage` of a JSON response body. vLLM and OpenAI put it last, so the
 * fast path parses only that member: from `"usage":` to the body's final
 * closing brace. It parses only when usage is the last member of the top-level
 * object (a nested one leaves unbalanced brackets), and the key must follow a
 * '{' or ',' (a quote inside a string is escaped); anything else takes the
 * full parse.
 */
export function usageOf(text: string): Usage | undefined {
  const key = text.lastIndexOf('"usage":');
  if (key > 0) {
    let before = key - 1;
    while (before > 0 && isJsonSpace(text.charCodeAt(before))) before--;
    let end = text.length - 1;
    while (end > key && isJsonSpace(text.charCodeAt(end))) end--;
    const opener = text.charCodeAt(before);
    if ((opener === 0x2c || opener === 0x7b) && text.charCodeAt(end) === 0x7d) {
      try {
        return (JSON.parse(text.slice(key + 8, end)) as Usage | null) ?? undefined;
      } catch {
        // not the top-level usage: fall through
      }
    }
  }
  try {
    const usage = (JSON.parse(text) as { usage?: Usage }).usage;
    return usage ?? undefined;
  } catch {
    return undefined;
  }
}

function isJsonSpace(code: number): boolean {
  return code === 0x20 || code === 0x0a || code === 0x0d || code === 0x09;
}

const NULL_USAGE_SUFFIX = ',"usage":null}';
const encoder = new TextEncoder();

/**
 * Relays SSE events from the pod to the client one by one, as they arrive (no
 * buffering beyond one event). Cheap per chunk: JSON is parsed only until the
 * first content token is seen and for the final usage chunk. A content chunk's
 * `"usage":null` tail (present because usage was forced on) is cut for clients
 * that did not ask — it can only be the object's last key, and inside JSON
 * strings quotes are escaped, so the suffix cannot occur in content.
 *
 * The first event is read before the response is handed back, so a pod that
 * fails before its first byte is still retryable on another pod; after that
 * the client has a 200 and a failure ends the stream with an SSE error event.
 */
async function relayStream(
  source: AsyncIterable<Buffer>,
  signal: SlotAbort,
  clientWantsUsage: boolean,
  hooks: UpstreamHooks,
): Promise<UpstreamResponse> {
  let resolveEnd!: (end: StreamEnd) => void;
  const end = new Promise<StreamEnd>((resolve) => {
    resolveEnd = resolve;
  });
  let usage: Usage | undefined;
  let sawFirstToken = false;
  let sawDone = false;
  let finished = false;
  const finish = (outcome: StreamEnd['outcome'], error?: Error) => {
    if (finished) return;
    finished = true;
    resolveEnd({ outcome, usage, ...(error ? { error } : {}) });
  };

  const pending: string[] = [];
  const decoder = createSseDecoder((event) => {
    const data = event.data;
    if (data === SSE_DONE_DATA) {
      sawDone = true;
      pending.push(SSE_DONE);
      return;
    }
    if (data.includes('"usage":{')) {
      try {
        const parsed = JSON.parse(data) as { usage?: Usage; choices?: unknown[] };
        if (parsed.usage) usage = parsed.usage;
        if (!clientWantsUsage && parsed.choices?.length === 0) return; // hidden usage chunk
      } catch {
        // not JSON: relay as is
      }
    }
    if (!sawFirstToken && hasContent(data)) {
      sawFirstToken = true;
      hooks.onFirstToken?.();
    }
    const relayed =
      !clientWantsUsage && data.endsWith(NULL_USAGE_SUFFIX)
        ? `${data.slice(0, -NULL_USAGE_SUFFIX.length)}}`
        : data;
    pending.push(`data: ${relayed}\n\n`);
  });
  const iterator = source[Symbol.asyncIterator]();

  /** Reads until at least one event is ready; '' at the end of the upstream body. */
  async function nextBatch(): Promise<string> {
    while (pending.length === 0) {
      const next = await iterator.next();
      if (next.done) {
        decoder.end();
        break;
      }
      decoder.feed(next.value);
    }
    const text = pending.join('');
    pending.length = 0;
    return text;
  }

  let first: string;
  try {
    first = await nextBatch();
  } catch (error) {
    if (signal.aborted) throw error;
    throw classify(error);
  }
  if (first === '')
    throw new UpstreamUnavailable('upstream closed the stream before any event', 'reset');

  let buffered: string | undefined = first;
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      let text: string;
      if (buffered !== undefined) {
        text = buffered;
        buffered = undefined;
      } else {
        try {
          text = await nextBatch();
        } catch (error) {
          if (signal.aborted) {
            if (signal.reason instanceof EvictedError) {
              // Flow control took the slot back (in-flight eviction): tell the client why.
              controller.enqueue(encoder.encode(encodeSseError(noticeDrop('evict').toBody())));
            } else if (signal.reason instanceof DrainAborted) {
              // The replica's drain timeout ended before the stream did.
              const message = 'This gateway replica shut down before the stream finished';
              controller.enqueue(encoder.encode(encodeSseError(draining(message).toBody())));
            }
            finish('cancelled');
            controller.close();
            return;
          }
          const message = `upstream stream failed: ${error instanceof Error ? error.message : String(error)}`;
          controller.enqueue(
            encoder.encode(encodeSseError(upstreamFailure(message, 'upstream_reset').toBody())),
          );
          finish('upstream_error', new Error(message));
          controller.close();
          return;
        }
      }
      if (text !== '') {
        controller.enqueue(encoder.encode(text));
      }
      if (sawDone) {
        finish('completed');
        controller.close();
        await iterator.return?.();
      } else if (text === '') {
        const message = 'upstream stream ended without [DONE]';
        controller.enqueue(
          encoder.encode(encodeSseError(upstreamFailure(message, 'upstream_truncated').toBody())),
        );
        finish('upstream_error', new Error(message));
        controller.close();
      }
    },
    async cancel() {
      // The client went away: stop reading; the caller aborts the upstream request.
      finish('cancelled');
      await iterator.return?.().catch(() => {});
    },
  });
  return { kind: 'stream', status: 200, body, end };
}

/** True when a chunk's JSON carries generated text (chat delta content or completion text). */
function hasContent(data: string): boolean {
  if (!data.includes('"content":"') && !data.includes('"text":"')) return false;
  try {
    const chunk = JSON.parse(data) as {
      choices?: Array<{ delta?: { content?: string }; text?: string }>;
    };
    const choice = chunk.choices?.[0];
    return Boolean(choice?.delta?.content || choice?.text);
  } catch {
    return false;
  }
}
