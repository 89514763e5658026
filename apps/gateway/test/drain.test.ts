import { type AppHandle, startSim, TEST_KEYS, writeGatewayConfig } from '@fairgate/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LeaderElection } from '../src/control/election.js';
import { type RunningGateway, startGateway } from '../src/index.js';

/**
 * Graceful drain of one in-process replica on the embedded scheduler (docs/gateway.md,
 * *Drain*): a budget of 2 on a sim whose iteration takes 15 ms, so requests of 100 tokens run
 * ~1.5 s and a third one waits in the queue. The cross-process drain with three replicas
 * under load is test/drain.test.ts.
 */
describe('drain (SIGTERM) of one replica', () => {
  let sim: AppHandle;
  beforeAll(async () => {
    sim = await startSim({
      args: { 'alpha-ms': 15, 'beta-ms': 0, 'gamma-ms': 0, model: 'sim-model' },
    });
  });
  afterAll(async () => {
    await sim?.stop();
  });

  async function start(drainTimeoutS: number, lines: string[]): Promise<RunningGateway> {
    const configPath = writeGatewayConfig({
      pods: [{ name: 'pod-a', url: sim.url, cap: 2 }],
      budget: 2,
      scheduler: { queue_ttl_ms: 20_000 },
      sections: {
        shutdown: { drain_timeout_s: drainTimeoutS },
        leader: { lease_ttl_ms: 10_000, renew_ms: 100 },
      },
    });
    return startGateway({
      configPath,
      port: 0,
      replicaId: `drain-${drainTimeoutS}`,
      log: (line) => lines.push(line),
    });
  }

  function chat(
    gateway: RunningGateway,
    maxTokens: number,
    stream = false,
  ): Promise<{ status: number; headers: Headers; body: string }> {
    return fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${TEST_KEYS.paying}`,
        'content-type': 'application/json',
      },
      body: JSON.stringify({
        model: 'sim-model',
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: maxTokens,
        stream,
      }),
    }).then(async (response) => ({
      status: response.status,
      headers: response.headers,
      body: await response.text(),
    }));
  }

  async function until(what: string, probe: () => boolean, timeoutMs = 5_000): Promise<void> {
    const deadline = performance.now() + timeoutMs;
    while (!probe()) {
      if (performance.now() > deadline) throw new Error(`${what}: not after ${timeoutMs} ms`);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  }

  it('refuses new requests, hands queued ones back, lets in-flight ones finish, steps down at once', async () => {
    const lines: string[] = [];
    const gateway = await start(5, lines);
    const { deps } = gateway;
    await until('leadership', () => deps.pools.first.control.election.fence !== null);
    // A follower on the same store: with a 10 s lease it leads within its 100 ms retry only
    // if the drain gives the lease up.
    const follower = new LeaderElection({
      store: deps.pools.first.scheduler,
      replica: 'follower',
      leaseTtlMs: 10_000,
      renewMs: 100,
    });
    follower.start();
    try {
      const inflight = chat(gateway, 100, true);
      const inflightJson = chat(gateway, 100);
      await until('two requests granted', () => deps.pools.first.leases.size === 2);
      const queued = chat(gateway, 4);
      await until('the second request queued', () => deps.pools.first.broker.waiting === 1);

      const drainedAt = performance.now();
      const drained = gateway.drain();
      const ready = await fetch(`${gateway.url}/readyz`);
      expect(ready.status).toBe(503);
      expect(((await ready.json()) as { status: string }).status).toBe('draining');

      const refused = await chat(gateway, 4);
      expect(refused.status).toBe(503);
      expect(refused.headers.get('retry-after')).toBe('1');
      expect(refused.headers.get('connection')).toBe('close');
      expect(JSON.parse(refused.body)).toMatchObject({
        error: { type: 'service_unavailable_error', code: 'draining' },
      });

      const handedBack = await queued;
      expect(handedBack.status).toBe(503);
      expect(JSON.parse(handedBack.body).error.code).toBe('draining');
      expect(JSON.parse(handedBack.body).error.message).toMatch(/handed the queued request back/);

      // The lease was given up at the start: the follower leads while the stream still runs.
      await until('the follower leads', () => follower.fence !== null, 2_000);
      const takeoverMs = performance.now() - drainedAt;
      expect(deps.pools.first.control.election.fence).toBeNull();
      expect(deps.pools.first.leases.size).toBe(2);
      expect(takeoverMs).toBeLessThan(1_000);

      // Answered during the drain: it closes its keep-alive connection.
      const json = await inflightJson;
      expect(json.status).toBe(200);
      expect(json.headers.get('connection')).toBe('close');
      const stream = await inflight;
      expect(stream.status).toBe(200);
      expect(stream.body).toContain('data: [DONE]');
      expect(stream.body).not.toContain('"error"');
      const report = await drained;
      expect(report).toMatchObject({ inProgress: 3, handedBack: 1, aborted: 0 });
      expect(lines.filter((l) => l.includes('draining replica'))).toHaveLength(1);
      expect(lines.filter((l) => l.includes('drained replica'))).toHaveLength(1);
      console.log(
        `drain: follower led ${takeoverMs.toFixed(0)} ms after the drain began; drained in ${report.ms} ms`,
      );
      const snapshot = await deps.pools.first.scheduler.snapshot();
      expect(snapshot.inflight + snapshot.waiting).toBe(0);
      const paying = snapshot.counters.find((c) => c.tenant === 'paying');
      expect(paying?.outcomes).toMatchObject({ completed: 2, cancelled: 1 });
    } finally {
      await follower.stop();
      await gateway.close();
    }
  }, 20_000);

  it('aborts what still runs at the drain timeout: 503 or an SSE error, leases released', async () => {
    const lines: string[] = [];
    const configPath = writeGatewayConfig({
      pods: [{ name: 'pod-a', url: sim.url, cap: 2 }],
      budget: 2,
      sections: { shutdown: { drain_timeout_s: 0.5 } },
    });
    const gateway = await startGateway({
      configPath,
      port: 0,
      replicaId: 'drain-abort',
      log: (line) => lines.push(line),
    });
    const { deps } = gateway;
    try {
      const stream = chat(gateway, 300, true);
      const json = chat(gateway, 300);
      await until('both granted', () => deps.pools.first.leases.size === 2);
      await new Promise((resolve) => setTimeout(resolve, 200)); // the stream has started
      const startedAt = performance.now();
      const report = await gateway.drain();
      const tookMs = performance.now() - startedAt;
      expect(report).toMatchObject({ inProgress: 2, handedBack: 0, aborted: 2 });
      expect(tookMs).toBeGreaterThanOrEqual(490);
      expect(tookMs).toBeLessThan(2_000);
      const streamed = await stream;
      expect(streamed.status).toBe(200);
      expect(streamed.body).toMatch(/"code":"draining"/);
      const answered = await json;
      expect(answered.status).toBe(503);
      expect(JSON.parse(answered.body).error.code).toBe('draining');
      const snapshot = await deps.pools.first.scheduler.snapshot();
      expect(snapshot.inflight).toBe(0);
      const paying = snapshot.counters.find((c) => c.tenant === 'paying');
      expect(paying?.outcomes).toMatchObject({ cancelled: 2, completed: 0 });
    } finally {
      await gateway.close();
    }
  }, 20_000);
});
