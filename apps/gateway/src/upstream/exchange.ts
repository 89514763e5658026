import type { Readable } from 'node:stream';
import {
  AUDIO_TOKENS_PER_SECOND,
  type StreamDialect,
  type Usage,
  usageOfResponse,
} from '@fairgate/openai';
import { type Dispatcher, errors as undiciErrors } from 'undici';
import type { PodState } from './pods.js';
import { ResponsesSseFilter } from './responses-sse-filter.js';
import type { SlotAbort } from './slot-abort.js';
import { SseFilter, type StreamFilter } from './sse-filter.js';
import { type UploadBody, uploadLength, uploadStream } from './upload-body.js';

/**
 * One HTTP exchange with a pod, on undici's `dispatch()` with a handler of our own: no
 * Readable stream, web stream, async iterator or body mixin per request. The request body
 * is forwarded with every field the client sent (vLLM extras included); for streams
 * `stream_options.include_usage` and `continuous_usage_stats` are forced on so the gateway
 * always learns the actual usage, and the usage so far from every chunk when the stream
 * ends early (the SseFilter hides both again from clients that did not ask).
 *
 * The answer is one of:
 * - `json`: the whole body, collected (a non-stream request, or a stream request the pod
 *   answered with something other than a 200 event stream);
 * - `stream`: a 200 event stream, handed back once its first event is in (so a pod that
 *   fails before any event is still retryable on another pod), its bytes flowing through
 *   the SseFilter to whatever `UpstreamStream.attach` gives (request/relay.ts).
 * A failure before that rejects with UpstreamUnavailable (retryable), or with the abort
 * reason when `signal` was aborted; a 5xx or 429 status is an UpstreamUnavailable too.
 */
export interface ExchangeRequest {
  path: string;
  /** The client's request body as it came (validated; the schemas are loose, no transforms). */
  text: string;
  stream: boolean;
  /** How the pod frames a stream: chat chunks and `[DONE]` (default), or Responses events. */
  dialect?: StreamDialect;
  /** Whether the body has a `stream_options` member. */
  hasStreamOptions: boolean;
  /** An upload's body: the file it was written to, sent instead of `text`. */
  upload?: UploadBody;
  headers: Record<string, string>;
  /** Aborted when the client goes away, the scheduler evicts the request or the drain ends. */
  signal: SlotAbort;
  /** The client's `stream_options.include_usage` (streams). */
  clientWantsUsage: boolean;
  /**
   * The client's `stream_options.continuous_usage_stats` with include_usage (streams): it
   * sees the usage so far on every chunk; any other client sees what vLLM would send it.
   */
  clientWantsContinuousUsage: boolean;
  /** t4: status and headers received. */
  onHeaders?: (status: number) => void;
  /** t5: the first content token arrived (for a collected body: the body). */
  onFirstToken?: () => void;
  /**
   * The gateway's estimate of the prompt's tokens: a Responses stream that ends before its
   * usage is metered with it (and with its deltas as the output).
   */
  inputTokens?: number;
}

export type UpstreamResponse =
  | { kind: 'json'; status: number; contentType: string; text: string; usage: Usage | undefined }
  | { kind: 'stream'; stream: UpstreamStream };

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

/** Where a stream's bytes go (request/relay.ts writes them to the client's socket). */
export interface StreamSink {
  /** Bytes for the client; false when it takes no more now: the pod is not read until resume(). */
  write(chunks: readonly Buffer[]): boolean;
  /**
   * Called once, when the stream ends: `[DONE]` passed (`filter.done`), the pod's body
   * ended without it, or the exchange failed (`error`: the abort reason, a reset, a timeout).
   */
  end(error: Error | undefined): void;
}

/** A pod's event stream after its first event: attach a sink to receive the rest. */
export class UpstreamStream {
  #head: Buffer[] = [];
  #sink: StreamSink | undefined;
  #ended = false;
  #endError: Error | undefined;
  #controller: Dispatcher.DispatchController | undefined;

  constructor(readonly filter: StreamFilter) {}

  /** True while bytes wait for attach() (the first event is in). */
  get hasHead(): boolean {
    return this.#head.length > 0;
  }

  /** Starts the flow to `sink`: what arrived so far first, then the rest as it comes. */
  attach(sink: StreamSink): void {
    this.#sink = sink;
    const head = this.#head;
    this.#head = [];
    const flowing = head.length === 0 || sink.write(head);
    if (this.#ended) sink.end(this.#endError);
    else if (flowing) this.resume();
  }

  /** The client took what was written (its 'drain'): read the pod again. */
  resume(): void {
    this.#controller?.resume();
  }

  /** @internal (the exchange's handler) */
  started(controller: Dispatcher.DispatchController): void {
    this.#controller = controller;
  }

  /** @internal */
  data(out: Buffer[]): void {
    if (this.#ended) return;
    if (out.length > 0) {
      let taken = false;
      if (this.#sink) taken = this.#sink.write(out);
      else this.#head.push(...out);
      // Not read further until attach() or the client's 'drain' (after [DONE] the rest
      // is read and dropped, so the connection goes back to the pool).
      if (!taken && !this.filter.done) this.#controller?.pause();
    }
    if (this.filter.done) this.end(undefined);
  }

  /** @internal */
  end(error: Error | undefined): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#endError = error;
    this.#controller?.resume(); // whatever is left of the body is read and dropped
    this.#sink?.end(error);
  }
}

/** Sends one request to `pod`. */
export function exchange(pod: PodState, request: ExchangeRequest): Promise<UpstreamResponse> {
  return new Promise((resolve, reject) => {
    const { signal } = request;
    if (signal.aborted) {
      reject(signal.reason);
      return;
    }
    let controller: Dispatcher.DispatchController | undefined;
    let status = 0;
    let contentType = 'application/json';
    let stream: UpstreamStream | undefined;
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    const onAbort = () => controller?.abort(signal.reason as Error);
    signal.addEventListener('abort', onAbort);
    const fail = (error: Error) => {
      settled = true;
      signal.removeEventListener('abort', onAbort);
      reject(signal.aborted ? signal.reason : classify(error));
    };
    const collected = () => {
      settled = true;
      signal.removeEventListener('abort', onAbort);
      if (status >= 500 || status === 429) {
        reject(
          new UpstreamUnavailable(
            `upstream ${pod.config.name} answered ${status}`,
            'status',
            status,
          ),
        );
        return;
      }
      const text = decodeUtf8(chunks, size);
      request.onFirstToken?.();
      resolve({
        kind: 'json',
        status,
        contentType,
        text,
        usage: status === 200 ? usageOf(text) : undefined,
      });
    };
    const handler: Dispatcher.DispatchHandler = {
      onRequestStart(started) {
        controller = started;
        if (signal.aborted) started.abort(signal.reason as Error);
      },
      onResponseStart(started, statusCode, headers) {
        if (statusCode < 200) return; // 1xx: the final status follows
        status = statusCode;
        const type = headers['content-type'];
        if (type !== undefined) contentType = String(type);
        request.onHeaders?.(statusCode);
        if (request.stream && status === 200 && contentType.includes('text/event-stream')) {
          stream = new UpstreamStream(
            request.dialect === 'responses'
              ? new ResponsesSseFilter(request.onFirstToken ?? noop, request.inputTokens)
              : new SseFilter(
                  request.clientWantsUsage,
                  request.onFirstToken ?? noop,
                  request.clientWantsContinuousUsage,
                ),
          );
          stream.started(started);
        }
      },
      onResponseData(_controller, chunk) {
        if (!stream) {
          chunks.push(chunk);
          size += chunk.length;
          return;
        }
        stream.data(stream.filter.push(chunk));
        if (!settled && (stream.filter.done || stream.hasHead)) {
          settled = true;
          resolve({ kind: 'stream', stream });
        }
      },
      onResponseEnd() {
        if (!stream) {
          if (!settled) collected();
          return;
        }
        signal.removeEventListener('abort', onAbort);
        if (!settled) {
          fail(new UpstreamUnavailable('upstream closed the stream before any event', 'reset'));
          return;
        }
        stream.end(undefined);
      },
      onResponseError(_controller, error) {
        if (stream && settled) {
          signal.removeEventListener('abort', onAbort);
          stream.end(signal.aborted ? (signal.reason as Error) : error);
          return;
        }
        if (settled) return;
        // After an error status the body is ignored anyway: the status decides.
        if (!stream && (status >= 500 || status === 429)) collected();
        else fail(error);
      },
    };
    pod.pool.dispatch(
      request.upload
        ? {
            method: 'POST',
            path: request.path,
            headers: {
              'content-type': request.upload.contentType,
              'content-length': String(uploadLength(request.upload)),
              ...request.headers,
            },
            // undici takes an async iterable body as it is (a Readable around it would read
            // ahead); its types name only Readable.
            body: uploadStream(request.upload) as unknown as Readable,
          }
        : {
            method: 'POST',
            path: request.path,
            headers: { 'content-type': 'application/json', ...request.headers },
            body: upstreamBody(request),
          },
      handler,
    );
  });
}

function noop(): void {}

/**
 * The body sent to the pod: the client's own text (no re-serialisation) unless a stream
 * needs `stream_options.include_usage` and `continuous_usage_stats` forced on (every chunk
 * then carries the usage so far: a stream the client abandons is still metered). A stream
 * without stream_options gets the member added before the object's closing brace; one with
 * stream_options is rebuilt.
 */
export function upstreamBody(request: ExchangeRequest): string {
  // A Responses stream reports its usage at its end anyway.
  if (!request.stream || request.dialect === 'responses') return request.text;
  if (!request.hasStreamOptions) {
    const close = request.text.lastIndexOf('}');
    return `${request.text.slice(0, close)},${FORCED_STREAM_OPTIONS}}`;
  }
  const body = JSON.parse(request.text) as { stream_options: Record<string, unknown> | null };
  return JSON.stringify({
    ...body,
    stream_options: { ...body.stream_options, include_usage: true, continuous_usage_stats: true },
  });
}

const FORCED_STREAM_OPTIONS =
  '"stream_options":{"include_usage":true,"continuous_usage_stats":true}';

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
  const usage = topLevelUsage(text);
  if (typeof usage !== 'object' || usage === null) return undefined;
  // A Responses API answer: input_tokens and output_tokens.
  if ('input_tokens' in usage) return usageOfResponse(usage);
  // A transcription's: seconds of audio, as the encoder tokens they amount to.
  const { seconds } = usage as { seconds?: unknown };
  if (typeof seconds === 'number' && !('prompt_tokens' in usage)) {
    const tokens = Math.ceil(seconds * AUDIO_TOKENS_PER_SECOND);
    return { prompt_tokens: tokens, completion_tokens: 0, total_tokens: tokens };
  }
  // A prefill-only answer may leave out completion_tokens (embeddings: none) and even
  // prompt_tokens (vLLM's rerank: total_tokens alone, all of them input).
  if (typeof usage.completion_tokens !== 'number') usage.completion_tokens = 0;
  if (typeof usage.prompt_tokens !== 'number' && typeof usage.total_tokens === 'number') {
    usage.prompt_tokens = usage.total_tokens - usage.completion_tokens;
  }
  return typeof usage.prompt_tokens === 'number' ? usage : undefined;
}

function topLevelUsage(text: string): Usage | undefined {
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
