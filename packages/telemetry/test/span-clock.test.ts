import { SpanKind } from '@opentelemetry/api';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { afterAll, describe, expect, it } from 'vitest';
import {
  addSpanEvent,
  endSpan,
  startChildSpan,
  startServerSpan,
  startTelemetry,
} from '../src/index.js';

type Time = [number, number];
const ns = (t: Time) => BigInt(t[0]) * 1_000_000_000n + BigInt(t[1]);

describe('one clock per request', () => {
  const exporter = new InMemorySpanExporter();
  const telemetry = startTelemetry({
    serviceName: 'fairgate-test',
    spanProcessors: [new SimpleSpanProcessor(exporter)],
  });
  afterAll(() => telemetry.shutdown());

  it('orders the starts, events and ends of a request exactly, even within one millisecond', async () => {
    for (let i = 0; i < 200; i++) {
      const server = startServerSpan(telemetry.tracer, 'POST', '/v1/completions', {});
      const queue = startChildSpan(
        telemetry.tracer,
        server.ctx,
        'fairgate.queue',
        SpanKind.INTERNAL,
      );
      endSpan(queue.span);
      const client = startChildSpan(telemetry.tracer, server.ctx, 'chat m', SpanKind.CLIENT);
      addSpanEvent(client.span, 'upstream.headers', { 'http.response.status_code': 200 });
      addSpanEvent(client.span, 'first_token');
      endSpan(client.span, { status: 200 });
      endSpan(server.span, { status: 200 });
    }
    await telemetry.flush(); // export waits for resource detection
    const spans = exporter.getFinishedSpans();
    expect(spans).toHaveLength(600);
    for (let i = 0; i < spans.length; i += 3) {
      const [queue, client, server] = spans.slice(i, i + 3);
      const times = [
        server!.startTime,
        queue!.startTime,
        queue!.endTime,
        client!.startTime,
        client!.events[0]!.time,
        client!.events[1]!.time,
        client!.endTime,
        server!.endTime,
      ].map((t) => ns(t as Time));
      for (let k = 1; k < times.length; k++) expect(times[k]! >= times[k - 1]!).toBe(true);
    }
    // Still wall-clock time (anchored at the request's start), not time since process start.
    const start = Number(ns(spans[2]!.startTime as Time) / 1_000_000n);
    expect(Math.abs(start - Date.now())).toBeLessThan(60_000);
  });
});
