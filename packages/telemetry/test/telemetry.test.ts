import { context, SpanKind } from '@opentelemetry/api';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import {
  createGatewayMetrics,
  endSpan,
  startChildSpan,
  startServerSpan,
  startTelemetry,
  traceHeaders,
} from '../src/index.js';
import { EXPORT_BATCH_DEFAULT, exportRequested } from '../src/sdk.js';

describe('exportRequested', () => {
  it.each([
    [{}, false],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' }, true],
    [{ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://127.0.0.1:4318/v1/traces' }, true],
    [{ OTEL_TRACES_EXPORTER: 'console' }, true],
    [{ OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://x' }, false],
  ])('%j -> %s', (env, expected) => expect(exportRequested(env)).toBe(expected));
});

describe('span tree and propagation', async () => {
  const exporter = new InMemorySpanExporter();
  const telemetry = await startTelemetry({
    serviceName: 'fairgate-test',
    spanProcessors: [new SimpleSpanProcessor(exporter)],
  });
  afterAll(() => telemetry.shutdown());

  it('continues an incoming trace and propagates it downstream', async () => {
    const incoming = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    const { span, ctx } = startServerSpan(telemetry.tracer, 'POST', '/v1/chat/completions', {
      traceparent: incoming,
    });
    const queue = startChildSpan(telemetry.tracer, ctx, 'fairgate.queue', SpanKind.INTERNAL);
    endSpan(queue.span);
    const client = startChildSpan(telemetry.tracer, ctx, 'chat m', SpanKind.CLIENT);
    const headers = traceHeaders(client.ctx);
    expect(headers.traceparent).toMatch(/^00-0af7651916cd43dd8448eb211c80319c-[0-9a-f]{16}-01$/);
    endSpan(client.span, { error: new Error('upstream reset') });
    endSpan(span, { status: 502 });
    await telemetry.flush();

    const spans = exporter.getFinishedSpans();
    expect(spans.map((s) => s.name)).toEqual([
      'fairgate.queue',
      'chat m',
      'POST /v1/chat/completions',
    ]);
    const server = spans[2]!;
    expect(server.spanContext().traceId).toBe('0af7651916cd43dd8448eb211c80319c');
    expect(spans[0]!.parentSpanContext?.spanId).toBe(server.spanContext().spanId);
    expect(server.status.code).toBe(2); // ERROR on 5xx
    expect(spans[1]!.status.code).toBe(2);
    expect(context.active()).toBeDefined();
  });

  it('starts a new trace without an incoming traceparent', async () => {
    const { span, ctx } = startServerSpan(telemetry.tracer, 'POST', '/v1/completions', {});
    expect(traceHeaders(ctx).traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    endSpan(span, { status: 429 });
    await telemetry.flush();
    expect(exporter.getFinishedSpans().at(-1)?.status.code).toBe(0); // 4xx is not a server error
  });
});

describe('gateway metrics', () => {
  it('renders the fairgate_ families with the replica label', async () => {
    const metrics = createGatewayMetrics({ replica: 'r1' });
    metrics.ttft.observe({ tenant: 'a', class: 'standard' }, 0.12);
    metrics.requests.inc({ tenant: 'a', class: 'standard', outcome: 'completed' });
    const text = await metrics.registry.metrics();
    for (const name of [
      'fairgate_ttft_seconds_bucket',
      'fairgate_requests_total',
      'fairgate_budget',
    ]) {
      expect(text).toContain(name);
    }
    expect(text).toContain('replica="r1"');
  });
});

describe('the export batch (OTEL_BSP_MAX_EXPORT_BATCH_SIZE)', () => {
  const saved = process.env.OTEL_BSP_MAX_EXPORT_BATCH_SIZE;
  afterEach(() => {
    if (saved === undefined) delete process.env.OTEL_BSP_MAX_EXPORT_BATCH_SIZE;
    else process.env.OTEL_BSP_MAX_EXPORT_BATCH_SIZE = saved;
  });

  it.each<[string, Record<string, string>, string | undefined, string | undefined]>([
    [
      'exporting, unset: fairgate sets its default',
      { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:1' },
      undefined,
      String(EXPORT_BATCH_DEFAULT),
    ],
    [
      'exporting, set by the operator: kept',
      { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:1' },
      '512',
      '512',
    ],
    ['not exporting: left unset', {}, undefined, undefined],
  ])('%s', async (_name, env, before, after) => {
    if (before === undefined) delete process.env.OTEL_BSP_MAX_EXPORT_BATCH_SIZE;
    else process.env.OTEL_BSP_MAX_EXPORT_BATCH_SIZE = before;
    const telemetry = await startTelemetry({ serviceName: 'fairgate-test', env });
    try {
      expect(telemetry.exporting).toBe('OTEL_EXPORTER_OTLP_ENDPOINT' in env);
      expect(process.env.OTEL_BSP_MAX_EXPORT_BATCH_SIZE).toBe(after);
    } finally {
      await telemetry.shutdown();
    }
  });
});
