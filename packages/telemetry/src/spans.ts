import {
  type Attributes,
  type Context,
  context,
  propagation,
  type Span,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  trace,
} from '@opentelemetry/api';

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
  replica: 'fairgate.replica',
  requestId: 'fairgate.request_id',
  outcome: 'fairgate.outcome',
  dropReason: 'fairgate.drop_reason',
  queueMs: 'fairgate.queue_ms',
  httpMethod: 'http.request.method',
  httpRoute: 'http.route',
  httpStatus: 'http.response.status_code',
  serverAddress: 'server.address',
  urlFull: 'url.full',
} as const;

export function startServerSpan(
  tracer: Tracer,
  method: string,
  route: string,
  incomingHeaders: Record<string, string | undefined>,
  startTime?: number,
): { span: Span; ctx: Context } {
  const parent = propagation.extract(context.active(), incomingHeaders);
  const span = tracer.startSpan(
    `${method} ${route}`,
    {
      kind: SpanKind.SERVER,
      attributes: { [Attr.httpMethod]: method, [Attr.httpRoute]: route },
      startTime,
    },
    parent,
  );
  return { span, ctx: trace.setSpan(parent, span) };
}

export function startChildSpan(
  tracer: Tracer,
  parent: Context,
  name: string,
  kind: SpanKind,
  attributes: Attributes = {},
  startTime?: number,
): { span: Span; ctx: Context } {
  const span = tracer.startSpan(name, { kind, attributes, startTime }, parent);
  return { span, ctx: trace.setSpan(parent, span) };
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
    if (options.error instanceof Error) span.recordException(options.error);
  } else if (options.status !== undefined && options.status >= 500) {
    span.setStatus({ code: SpanStatusCode.ERROR });
  }
  span.end(options.endTime);
}

export { SpanKind };
