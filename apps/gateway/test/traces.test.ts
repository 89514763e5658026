import { Attr, SpanEvents, startTelemetry, type Telemetry } from '@fairgate/telemetry';
import { type AppHandle, TEST_KEYS } from '@fairgate/testkit';
import { hrTimeToMilliseconds } from '@opentelemetry/core';
import {
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningGateway } from '../src/index.js';
import { type GatewayStack, startGatewayStack } from './fixture.js';

describe('traces t1..t7', () => {
  const exporter = new InMemorySpanExporter();
  let telemetry: Telemetry;
  let stack: GatewayStack;
  let sim: AppHandle;
  let gateway: RunningGateway;

  beforeAll(async () => {
    telemetry = await startTelemetry({
      serviceName: 'fairgate-test',
      spanProcessors: [new SimpleSpanProcessor(exporter)],
    });
    stack = await startGatewayStack({
      replicaId: 'trace-r1',
      simArgs: { 'alpha-ms': 5 },
      telemetry,
    });
    ({ sim, gateway } = stack);
  });
  afterAll(async () => {
    await stack?.close();
    await telemetry.shutdown();
  });

  it('has one SERVER span with queue and upstream children, ordered times, attributes and propagation', async () => {
    const parentTrace = '4bf92f3577b34da6a3ce929d0e0e4736';
    const response = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_KEYS.paying}`,
        'content-type': 'application/json',
        traceparent: `00-${parentTrace}-00f067aa0ba902b7-01`,
      },
      body: JSON.stringify({
        model: 'sim-model',
        messages: [{ role: 'user', content: 'trace me' }],
        max_tokens: 6,
        stream: true,
      }),
    });
    expect(response.status).toBe(200);
    await response.text();
    await expect
      .poll(async () => {
        await telemetry.flush();
        return exporter.getFinishedSpans().some((s) => s.name === 'POST /v1/chat/completions');
      })
      .toBe(true);

    const spans = exporter.getFinishedSpans();
    const server = spans.find((s) => s.name === 'POST /v1/chat/completions')!;
    const queue = spans.find((s) => s.name === 'fairgate.queue')!;
    const client = spans.find((s) => s.name === 'chat sim-model')!;
    expect(server.kind).toBe(1); // SERVER
    expect(client.kind).toBe(2); // CLIENT
    for (const span of [server, queue, client])
      expect(span.spanContext().traceId).toBe(parentTrace);
    expect(queue.parentSpanContext?.spanId).toBe(server.spanContext().spanId);
    expect(client.parentSpanContext?.spanId).toBe(server.spanContext().spanId);

    const ms = (t: ReadableSpan['startTime']) => hrTimeToMilliseconds(t);
    const event = (name: string) => client.events.find((e) => e.name === name)!;
    const t1 = ms(server.startTime);
    const t2 = ms(queue.endTime);
    const t3 = ms(client.startTime);
    const t4 = ms(event(SpanEvents.upstreamHeaders).time);
    const t5 = ms(event(SpanEvents.firstToken).time);
    const t6 = ms(client.endTime);
    const t7 = ms(server.endTime);
    const times = [t1, t2, t3, t4, t5, t6, t7];
    for (let i = 1; i < times.length; i++) expect(times[i]).toBeGreaterThanOrEqual(times[i - 1]!);

    expect(server.attributes).toMatchObject({
      [Attr.requestModel]: 'sim-model',
      [Attr.tenant]: 'paying',
      [Attr.sloClass]: 'standard',
      [Attr.pod]: 'pod-a',
      [Attr.replica]: 'trace-r1',
      [Attr.outputTokens]: 6,
    });
    expect(server.attributes[Attr.inputTokens]).toBeGreaterThan(0);

    const seen = (await (await fetch(`${sim.url}/debug/last-traceparent`)).json()) as {
      traceparent: string;
    };
    expect(seen.traceparent).toMatch(
      new RegExp(`^00-${parentTrace}-${client.spanContext().spanId}-01$`),
    );
  });
});
