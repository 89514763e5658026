import { randomFillSync } from 'node:crypto';
import {
  type Attributes,
  type Context,
  context,
  type HrTime,
  propagation,
  type Span,
  SpanKind,
  type SpanOptions,
  SpanStatusCode,
  TraceFlags,
  type Tracer,
  trace,
} from '@opentelemetry/api';
import { LinkedContext } from './linked-context.js';

/**
 * The request span tree of docs/architecture.md ("Request lifecycle"):
 *   SERVER `POST /v1/chat/completions`       t1 .. t7
 *     INTERNAL `fairgate.queue`              t1 .. t2
 *     CLIENT   `chat <model>`                t3 .. t6, events upstream.headers (t4), first_token (t5)
 */
export const SpanNames = {
  queue: 'fairgate.queue',
} as const;

export const SpanEvents = {
  upstreamHeaders: 'upstream.headers',
  firstToken: 'first_token',
} as const;

/** Attribute keys: OpenTelemetry gen_ai.* semantic conventions plus fairgate.*. */
export const Attr = {
  operationName: 'gen_ai.operation.name',
  system: 'gen_ai.system',
  requestModel: 'gen_ai.request.model',
  requestMaxTokens: 'gen_ai.request.max_tokens',
  responseModel: 'gen_ai.response.model',
  inputTokens: 'gen_ai.usage.input_tokens',
  outputTokens: 'gen_ai.usage.output_tokens',
  tenant: 'fairgate.tenant',
  sloClass: 'fairgate.class',
  pod: 'fairgate.pod',
  pool: 'fairgate.pool',
  replica: 'fairgate.replica',
  requestId: 'fairgate.request_id',
  outcome: 'fairgate.outcome',
  dropReason: 'fairgate.drop_reason',
  queueMs: 'fairgate.queue_ms',
  /** true on a request that took a completed request's slot (slot recycling). */
  slotRecycled: 'fairgate.slot_recycled',
  httpMethod: 'http.request.method',
  httpRoute: 'http.route',
  httpStatus: 'http.response.status_code',
  serverAddress: 'server.address',
  urlFull: 'url.full',
} as const;

/**
 * The times of one request's spans. The SDK anchors each span at its own
 * `Date.now()`, whole milliseconds, and measures from there: two spans of one
 * request can then be up to 1 ms out of order (a child starting before its
 * sibling ended). One wall-clock anchor per request, taken at the SERVER span
 * and advanced by the monotonic clock, gives every span start, end, event and
 * exception of the request exact relative times (t1 <= t2 <= ... <= t7).
 *
 * The requests of a replica share that anchor (`replicaClock`): their spans lie on one
 * sub-millisecond time line, so times compare across traces too (a release against the
 * grant it made for another request, bench:waiting's BENCH_TRACES), which per-request
 * `Date.now()` anchors, each up to 1 ms early, did not allow.
 */
interface RequestClock {
  wallMs: number;
  perfMs: number;
}

/**
 * The replica's span clock: `performance.timeOrigin` (the wall clock at process start, to
 * the microsecond) advanced by the monotonic clock. When the wall clock moves away from it
 * (NTP stepping or slewing it over a long uptime) by more than the 1 ms `Date.now()`
 * rounds to, the anchor is taken again from `Date.now()` (its middle millisecond), so
 * spans keep wall-clock time to ~1 ms, as other services' spans in the same trace expect.
 */
let replicaAnchor: RequestClock = { wallMs: performance.timeOrigin, perfMs: 0 };

/**
 * The anchor a request starting now measures from (the same object while it holds).
 * `perfNow` and `wallNow` are read now unless given (tests give both).
 */
export function replicaClock(perfNow?: number, wallNow?: number): Readonly<RequestClock> {
  let pair = { perf: perfNow ?? performance.now(), wall: wallNow ?? Date.now() };
  // A pause between the two reads (the process descheduled on a busy host) looks like a
  // wall-clock step, and re-anchoring on it would move later spans by the pause and back:
  // before re-anchoring, the two clocks are read again, back to back.
  if (offAnchor(pair) && perfNow === undefined) pair = clockPair();
  if (offAnchor(pair)) replicaAnchor = { wallMs: pair.wall + 0.5, perfMs: pair.perf };
  return replicaAnchor;
}

/** Whether the replica's anchor is more than Date.now()'s rounding away from the wall clock. */
function offAnchor({ perf, wall }: { perf: number; wall: number }): boolean {
  const onAnchor = replicaAnchor.wallMs + (perf - replicaAnchor.perfMs);
  // Date.now() is the wall clock rounded down to the millisecond: [wall, wall + 1).
  return onAnchor < wall - 1 || onAnchor > wall + 2;
}

/**
 * The monotonic and the wall clock read at one instant: Date.now() between two reads of
 * performance.now() no more than 0.2 ms apart (the best of 5 tries), taken at their middle.
 */
function clockPair(): { perf: number; wall: number } {
  let best = { perf: 0, wall: 0, spread: Number.POSITIVE_INFINITY };
  for (let tries = 0; tries < 5 && best.spread > 0.2; tries += 1) {
    const before = performance.now();
    const wall = Date.now();
    const after = performance.now();
    if (after - before < best.spread) {
      best = { perf: (before + after) / 2, wall, spread: after - before };
    }
  }
  return best;
}

const clocks = new WeakMap<Span, RequestClock>();

function timeOn(clock: RequestClock): HrTime {
  const ms = clock.wallMs + (performance.now() - clock.perfMs);
  const seconds = Math.floor(ms / 1_000);
  const nanos = Math.round((ms - seconds * 1_000) * 1_000_000);
  return nanos >= 1_000_000_000 ? [seconds + 1, nanos - 1_000_000_000] : [seconds, nanos];
}

/** Now on the request clock of `span`, or undefined (the SDK's own time) when it has none. */
function spanNow(span: Span): HrTime | undefined {
  const clock = clocks.get(span);
  return clock ? timeOn(clock) : undefined;
}

export function startServerSpan(
  tracer: Tracer,
  method: string,
  route: string,
  incomingHeaders: Record<string, string | undefined>,
  startTime?: number,
): { span: Span; ctx: Context } {
  // The request's contexts are LinkedContexts from here on (children derive from these).
  const parent = propagation.extract(LinkedContext.from(context.active()), incomingHeaders);
  const clock =
    startTime === undefined && !(tracer instanceof PropagationOnlyTracer)
      ? replicaClock()
      : undefined;
  const span = tracer.startSpan(
    `${method} ${route}`,
    {
      kind: SpanKind.SERVER,
      attributes: { [Attr.httpMethod]: method, [Attr.httpRoute]: route },
      startTime: clock ? timeOn(clock) : startTime,
    },
    parent,
  );
  if (clock && span.isRecording()) clocks.set(span, clock);
  return { span, ctx: trace.setSpan(parent, span) };
}

/** A child span; it shares the request clock of the span in `parent`, if any. */
export function startChildSpan(
  tracer: Tracer,
  parent: Context,
  name: string,
  kind: SpanKind,
  attributes: Attributes = {},
  startTime?: number,
): { span: Span; ctx: Context } {
  const parentSpan = startTime === undefined ? trace.getSpan(parent) : undefined;
  const clock = parentSpan ? clocks.get(parentSpan) : undefined;
  const span = tracer.startSpan(
    name,
    { kind, attributes, startTime: clock ? timeOn(clock) : startTime },
    parent,
  );
  if (clock && span.isRecording()) clocks.set(span, clock);
  return { span, ctx: trace.setSpan(parent, span) };
}

/** Adds an event now (on the span's request clock). */
export function addSpanEvent(span: Span, name: string, attributes?: Attributes): void {
  span.addEvent(name, attributes, spanNow(span));
}

/** W3C trace context headers (traceparent, tracestate) for an outgoing request. */
export function traceHeaders(ctx: Context): Record<string, string> {
  const headers: Record<string, string> = {};
  propagation.inject(ctx, headers);
  return headers;
}

/**
 * Ends a span once. SERVER spans are ERROR only on 5xx (semantic conventions);
 * CLIENT spans on any failure.
 */
export function endSpan(
  span: Span,
  options: { error?: unknown; status?: number; endTime?: number } = {},
): void {
  if (options.status !== undefined) span.setAttribute(Attr.httpStatus, options.status);
  if (options.error !== undefined) {
    const message = options.error instanceof Error ? options.error.message : String(options.error);
    span.setStatus({ code: SpanStatusCode.ERROR, message });
    if (options.error instanceof Error) span.recordException(options.error, spanNow(span));
  } else if (options.status !== undefined && options.status >= 500) {
    span.setStatus({ code: SpanStatusCode.ERROR });
  }
  span.end(options.endTime ?? spanNow(span));
}

export { SpanKind };

/**
 * The tracer used when no span is recorded anywhere (no exporter, no test
 * processor): every span is a non-recording span that only carries W3C trace
 * context, so traceparent still reaches the pods (same trace id, a fresh span
 * id per span) while attributes, events and ends cost nothing. Sampling
 * follows the SDK default, parent-based always-on: sampled unless the parent
 * says otherwise. Recording SDK spans cost ~5% of the gateway's CPU per
 * request with nothing consuming them.
 */
export class PropagationOnlyTracer implements Tracer {
  startSpan(_name: string, options: SpanOptions = {}, ctx: Context = context.active()): Span {
    const parent = options.root ? undefined : trace.getSpanContext(ctx);
    const valid = parent !== undefined && trace.isSpanContextValid(parent);
    return trace.wrapSpanContext({
      traceId: valid ? parent.traceId : randomId(16),
      spanId: randomId(8),
      traceFlags: valid ? parent.traceFlags & TraceFlags.SAMPLED : TraceFlags.SAMPLED,
      ...(valid && parent.traceState ? { traceState: parent.traceState } : {}),
    });
  }

  startActiveSpan<F extends (span: Span) => unknown>(
    name: string,
    ...args: unknown[]
  ): ReturnType<F> {
    const fn = args.at(-1) as (span: Span) => ReturnType<F>;
    const options = (args.length > 1 ? args[0] : undefined) as SpanOptions | undefined;
    const parent = (args.length > 2 ? args[1] : undefined) as Context | undefined;
    const ctx = parent ?? context.active();
    const span = this.startSpan(name, options, ctx);
    return context.with(trace.setSpan(ctx, span), fn, undefined, span);
  }
}

const ID_POOL_BYTES = 4_096;
const idPool = Buffer.alloc(ID_POOL_BYTES);
let idPoolOffset = ID_POOL_BYTES;

/** `bytes` random bytes as lower-case hex, never all zero (an invalid W3C id). */
function randomId(bytes: 8 | 16): string {
  for (;;) {
    if (idPoolOffset + bytes > ID_POOL_BYTES) {
      randomFillSync(idPool);
      idPoolOffset = 0;
    }
    const start = idPoolOffset;
    idPoolOffset += bytes;
    for (let i = start; i < start + bytes; i++) {
      if (idPool[i] !== 0) return idPool.toString('hex', start, start + bytes);
    }
  }
}
