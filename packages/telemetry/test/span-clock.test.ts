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
import { replicaClock } from '../src/spans.js';

type Time = [number, number];
const ns = (t: Time) => BigInt(t[0]) * 1_000_000_000n + BigInt(t[1]);

// One SDK per process: its tracer provider is global.
const exporter = new InMemorySpanExporter();
const telemetry = await startTelemetry({
  serviceName: 'fairgate-test',
  spanProcessors: [new SimpleSpanProcessor(exporter)],
});
afterAll(() => telemetry.shutdown());

describe('one clock per request', () => {
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

describe('one clock per replica', () => {
  it('orders the spans of requests made one after another across their traces, to the microsecond', async () => {
    exporter.reset();
    for (let i = 0; i < 300; i++) {
      const server = startServerSpan(telemetry.tracer, 'POST', '/v1/chat/completions', {});
      const client = startChildSpan(telemetry.tracer, server.ctx, 'chat m', SpanKind.CLIENT);
      endSpan(client.span, { status: 200 });
      endSpan(server.span, { status: 200 });
    }
    await telemetry.flush();
    const spans = exporter.getFinishedSpans();
    expect(spans).toHaveLength(600);
    // Each request's SERVER span ends before the next request's starts: within a
    // millisecond, per-request Date.now() anchors put ~half of these out of order.
    for (let i = 3; i < spans.length; i += 2) {
      const previousEnd = ns(spans[i - 2]!.endTime as Time);
      const nextStart = ns(spans[i]!.startTime as Time);
      expect(nextStart >= previousEnd, `request ${(i - 1) / 2}`).toBe(true);
    }
  });

  // A known anchor: one call far off re-anchors, the next (also off) re-anchors at 5e6 ms.
  const base = () => {
    replicaClock(0, 9e12);
    return replicaClock(1_000, 5_000_000);
  };

  it.each([
    // [case, performance.now(), Date.now(), re-anchored]
    ['on the anchor', 1_500, 5_000_500, false],
    ['up to 1 ms behind the wall clock', 1_500, 5_000_501, false],
    ['more than 1 ms behind: NTP moved the wall clock on', 1_500, 5_000_502, true],
    ['up to 1 ms ahead', 1_500, 5_000_499, false],
    ['more than 1 ms ahead: NTP moved it back', 1_500, 5_000_498, true],
  ])('replicaClock: %s', (_, perfNow, wallNow, reanchored) => {
    const before = base();
    expect(before).toEqual({ wallMs: 5_000_000.5, perfMs: 1_000 });
    const after = replicaClock(perfNow, wallNow);
    if (reanchored) {
      expect(after).not.toBe(before);
      expect(after).toEqual({ wallMs: wallNow + 0.5, perfMs: perfNow });
    } else {
      expect(after).toBe(before);
    }
  });
});
