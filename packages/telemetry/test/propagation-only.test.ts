import { SpanKind, TraceFlags, trace } from '@opentelemetry/api';
import { afterAll, describe, expect, it } from 'vitest';
import {
  endSpan,
  startChildSpan,
  startServerSpan,
  startTelemetry,
  traceHeaders,
} from '../src/index.js';
import { PropagationOnlyTracer } from '../src/spans.js';

describe('telemetry.traces: false', () => {
  it('exports nothing even when OTEL_* ask for export, and still propagates', async () => {
    const telemetry = startTelemetry({
      serviceName: 'fairgate-test',
      env: { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:1' },
      traces: false,
    });
    try {
      expect(telemetry.exporting).toBe(false);
      expect(telemetry.tracer).toBeInstanceOf(PropagationOnlyTracer);
    } finally {
      await telemetry.shutdown();
    }
  });
});

describe('PropagationOnlyTracer (nothing records spans)', () => {
  // No OTEL_* export and no processor: the SDK only registers the W3C propagator.
  const telemetry = startTelemetry({ serviceName: 'fairgate-test', env: {} });
  const tracer = telemetry.tracer;
  afterAll(() => telemetry.shutdown());

  it('is what startTelemetry hands out when nothing records', () => {
    expect(tracer).toBeInstanceOf(PropagationOnlyTracer);
  });

  it('continues an incoming trace with a fresh span id per span', () => {
    const { span, ctx } = startServerSpan(tracer, 'POST', '/v1/chat/completions', {
      traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
    });
    const client = startChildSpan(tracer, ctx, 'chat m', SpanKind.CLIENT, { a: 1 });
    expect(span.isRecording()).toBe(false);
    expect(span.spanContext().traceId).toBe('0af7651916cd43dd8448eb211c80319c');
    expect(span.spanContext().spanId).not.toBe('b7ad6b7169203331');
    expect(client.span.spanContext().spanId).not.toBe(span.spanContext().spanId);
    expect(traceHeaders(client.ctx).traceparent).toBe(
      `00-0af7651916cd43dd8448eb211c80319c-${client.span.spanContext().spanId}-01`,
    );
    endSpan(client.span, { error: new Error('x'), status: 502 }); // no-ops, no throw
    endSpan(span, { status: 200 });
  });

  it('starts a valid sampled trace without a parent and keeps an unsampled parent unsampled', () => {
    const root = startServerSpan(tracer, 'POST', '/v1/completions', {});
    expect(trace.isSpanContextValid(root.span.spanContext())).toBe(true);
    expect(traceHeaders(root.ctx).traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);

    const unsampled = startServerSpan(tracer, 'POST', '/v1/completions', {
      traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00',
    });
    expect(unsampled.span.spanContext().traceFlags).toBe(TraceFlags.NONE);
    expect(traceHeaders(unsampled.ctx).traceparent).toMatch(/-00$/);
  });

  it('gives distinct ids across many spans', () => {
    const ids = new Set<string>();
    for (let i = 0; i < 2_000; i++) ids.add(tracer.startSpan('s').spanContext().spanId);
    expect(ids.size).toBe(2_000);
  });
});
