import { SpanNames } from '@fairgate/telemetry';
import { startGatewayProcess, stopAll, TEST_KEYS, writeGatewayConfig } from '@fairgate/testkit';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  nanosToMs,
  type OtlpReceiver,
  OtlpSpanKind,
  parseExport,
  releaseToGrantMs,
  startOtlpReceiver,
} from '../../test/support/otlp-receiver.js';
import { workloadBody } from '../bench/harness/load.js';
import { startStaticUpstream, type Upstream } from '../bench/harness/stack.js';

describe('releaseToGrantMs', () => {
  it.each([
    ['one grant per release, in order', [1, 2, 3], [1.5, 2.25, 3.5], [0.5, 0.25, 0.5]],
    ['inputs in any order', [3, 1, 2], [2.25, 3.5, 1.5], [0.5, 0.25, 0.5]],
    ['releases without a grant left over', [1, 2, 3, 4], [1.5, 2.5], [0.5, 0.5]],
    ['grants without a release left over', [1], [1.5, 2.5], [0.5]],
    ['nothing', [], [], []],
  ])('%s', (_, releases, grants, expected) => {
    expect(releaseToGrantMs(releases, grants)).toEqual(expected);
  });
});

describe('nanosToMs', () => {
  it.each([
    ['a decimal string past 2^53, to the microsecond', '1795764853016123456', 1795764853016.123],
    ['a number', 1_500_000, 1.5],
    ['the {low, high} halves', { low: 1_500_000, high: 0 }, 1.5],
    ['halves with the high word set', { low: 0, high: 1 }, 4294.967],
  ])('%s', (_, nanos, ms) => {
    expect(nanosToMs(nanos)).toBeCloseTo(ms, 3);
  });
});

describe('parseExport', () => {
  it('reads names, kinds, times and typed attributes; tolerates missing parts', () => {
    const spans = parseExport({
      resourceSpans: [
        {
          scopeSpans: [
            {
              spans: [
                {
                  traceId: 't',
                  spanId: 's',
                  name: 'chat m',
                  kind: 3,
                  startTimeUnixNano: '1000000',
                  endTimeUnixNano: '3500000',
                  attributes: [
                    { key: 'a', value: { stringValue: 'x' } },
                    { key: 'b', value: { intValue: '7' } },
                    { key: 'c', value: { doubleValue: 0.5 } },
                    { key: 'd', value: { boolValue: false } },
                    { key: 'e' },
                  ],
                },
              ],
            },
            {},
          ],
        },
        {},
      ],
    });
    expect(spans).toEqual([
      {
        traceId: 't',
        spanId: 's',
        name: 'chat m',
        kind: 3,
        startMs: 1,
        endMs: 3.5,
        attributes: { a: 'x', b: 7, c: 0.5, d: false },
      },
    ]);
    expect(parseExport({})).toEqual([]);
  });
});

/**
 * What bench:waiting relies on, from a real gateway exporting through the OpenTelemetry
 * SDK's own OTLP/HTTP exporter (configured by OTEL_* variables only), in either encoding: a
 * streamed request's queue span ends (t2) before its CLIENT span starts, and the CLIENT
 * span ends at the release, before the SERVER span.
 */
describe.each(['http/json', 'http/protobuf'] as const)(
  'OTLP receiver, fed by a gateway replica exporting %s',
  (protocol) => {
    let receiver: OtlpReceiver;
    let upstream: Upstream;
    let gatewayUrl: string;

    beforeAll(async () => {
      receiver = await startOtlpReceiver();
      upstream = await startStaticUpstream();
      const config = writeGatewayConfig({
        budget: 4,
        pods: [{ name: 'pod-a', url: upstream.url, cap: 4 }],
      });
      const gateway = await startGatewayProcess({
        config,
        replicaId: 'otlp-test',
        env: receiver.exportEnv({ protocol }),
      });
      gatewayUrl = gateway.url;
    }, 30_000);
    afterAll(async () => {
      await stopAll();
      await receiver?.close();
    });

    it('receives the request span tree with ordered times', async () => {
      const res = await request(`${gatewayUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          authorization: `Bearer ${TEST_KEYS.paying}`,
        },
        body: workloadBody('stream16'),
      });
      expect(res.statusCode).toBe(200);
      await res.body.text();
      await expect.poll(() => receiver.spans.length, { timeout: 10_000 }).toBeGreaterThanOrEqual(3);
      const named = (kind: number, match: (name: string) => boolean) =>
        receiver.spans.filter((s) => s.kind === kind && match(s.name));
      const [server] = named(OtlpSpanKind.server, (n) => n === 'POST /v1/chat/completions');
      const [queue] = named(OtlpSpanKind.internal, (n) => n === SpanNames.queue);
      const [client] = named(OtlpSpanKind.client, (n) => n.startsWith('chat '));
      expect(server && queue && client).toBeTruthy();
      expect(server!.traceId).toMatch(/^[0-9a-f]{32}$/);
      expect(server!.spanId).toMatch(/^[0-9a-f]{16}$/);
      for (const span of [queue!, client!]) expect(span.traceId).toBe(server!.traceId);
      expect(queue!.attributes['fairgate.tenant']).toBeDefined();
      expect(server!.attributes['http.response.status_code']).toBe(200);
      const wall = Date.now();
      expect(Math.abs(server!.startMs - wall)).toBeLessThan(60_000);
      expect(server!.startMs).toBeLessThanOrEqual(queue!.startMs);
      expect(queue!.endMs).toBeLessThanOrEqual(client!.startMs);
      expect(client!.endMs).toBeLessThanOrEqual(server!.endMs);
      expect(receiver.protobufBytes > 0).toBe(protocol === 'http/protobuf');
    });
  },
);
