import {
  defaultTestTenants,
  startGatewayProcess,
  startSim,
  stopAll,
  TEST_KEYS,
  writeGatewayConfig,
} from '@fairgate/testkit';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { expectConserved, type Pool, SIM_MODEL, sleep, startPool } from './support/pool.js';

/**
 * Graceful drain across processes (docs/gateway.md, *Drain*): three gateway replicas on one
 * Redis, two sims, a steady closed-loop load through a client that, like a balancer with
 * retries, sends a 503 (or a refused connection) to another replica and stops using the one
 * that answered it. One replica gets SIGTERM mid-load: the leader in one case, a follower in
 * the other. A probe stream longer than the drain timeout runs on it.
 *
 * - the client sees no failed request;
 * - the replica exits (code 0) within drain_timeout_s + 2 s; the probe ends at the timeout
 *   with an SSE error event `draining`;
 * - a drained leader is replaced within 1 s although its lease TTL is 10 s (it gives the
 *   lease up at the start of the drain); a drained follower leaves the leader alone;
 * - nothing stays in flight pool-wide and every outcome is conserved.
 */
const DRAIN_TIMEOUT_S = 3;
const LEASE_TTL_MS = 10_000;
const WORKERS = 14;

interface Attempt {
  status: number;
  code: string | null;
  /** A connection error: `refused` (nothing was sent) or `failed` (reset, anything else). */
  network: 'refused' | 'failed' | null;
}

async function chatOnce(url: string): Promise<Attempt> {
  try {
    const response = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TEST_KEYS.paying}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: SIM_MODEL,
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 4,
      }),
      signal: AbortSignal.timeout(10_000),
    });
    const text = await response.text();
    const code = response.ok ? null : (/"code":"([a-z_]+)"/.exec(text)?.[1] ?? null);
    return { status: response.status, code, network: null };
  } catch (error) {
    const cause = (error as { cause?: { code?: string } }).cause;
    return {
      status: -1,
      code: cause?.code ?? null,
      network: cause?.code === 'ECONNREFUSED' ? 'refused' : 'failed',
    };
  }
}

/** Round-robin over the replicas; a 503 or a refused connection goes to the next one. */
class RetryingClient {
  readonly avoided = new Set<string>();
  completed = 0;
  failed: Attempt[] = [];
  retried503 = 0;
  retriedRefused = 0;
  #next = 0;

  constructor(private readonly urls: readonly string[]) {}

  #pick(): string | undefined {
    for (let i = 0; i < this.urls.length; i++) {
      const url = this.urls[this.#next++ % this.urls.length]!;
      if (!this.avoided.has(url)) return url;
    }
    return undefined;
  }

  async request(): Promise<void> {
    for (let attempt = 0; attempt < this.urls.length + 1; attempt++) {
      const url = this.#pick();
      if (!url) break;
      const result = await chatOnce(url);
      if (result.status === 200) {
        this.completed += 1;
        return;
      }
      if (result.status === 503 || result.network === 'refused') {
        // A balancer drops a replica that is not ready or not listening; the client retries.
        this.avoided.add(url);
        if (result.status === 503) this.retried503 += 1;
        else this.retriedRefused += 1;
        continue;
      }
      this.failed.push(result);
      return;
    }
    this.failed.push({ status: 0, code: 'no replica left', network: null });
  }
}

/** A stream of `maxTokens` tokens straight to one replica; resolves with its SSE text. */
/**
 * A long stream on `url`. `streaming` resolves once its answer's head arrived: it holds a
 * slot on a pod (a request still queued at the signal is handed back with 503 draining).
 */
function probeStream(
  url: string,
  maxTokens: number,
): { streaming: Promise<void>; ended: Promise<{ status: number; body: string; ms: number }> } {
  let headed: () => void = () => {};
  const streaming = new Promise<void>((resolve) => {
    headed = resolve;
  });
  return { streaming, ended: runProbe(url, maxTokens, () => headed()) };
}

async function runProbe(
  url: string,
  maxTokens: number,
  onHead: () => void,
): Promise<{ status: number; body: string; ms: number }> {
  const startedAt = performance.now();
  try {
    const response = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TEST_KEYS.paying}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: SIM_MODEL,
        messages: [{ role: 'user', content: 'a long answer please' }],
        max_tokens: maxTokens,
        stream: true,
      }),
    });
    onHead();
    const body = await response.text();
    return { status: response.status, body, ms: performance.now() - startedAt };
  } catch (error) {
    onHead();
    return { status: -1, body: String(error), ms: performance.now() - startedAt };
  }
}

describe.each(['leader', 'follower'] as const)(
  'drain of the %s under load (3 replicas, 2 sims)',
  (role) => {
    let pool: Pool | undefined;
    afterEach(async () => {
      await pool?.stop();
      pool = undefined;
    });

    it(`SIGTERM: no failed request, exit within the drain timeout + 2 s, ${role === 'leader' ? 'a new leader within 1 s' : 'the leader stays'}, conserved`, async () => {
      pool = await startPool({
        replicas: 3,
        sims: [{ 'alpha-ms': 10 }, { 'alpha-ms': 10 }],
        budget: 6,
        tenants: defaultTestTenants(),
        scheduler: { queue_ttl_ms: 5_000 },
        sections: {
          leader: { lease_ttl_ms: LEASE_TTL_MS, renew_ms: 250 },
          shutdown: { drain_timeout_s: DRAIN_TIMEOUT_S },
        },
      });
      const { gateways } = pool;
      const names = gateways.map((_, i) => `replica-${i + 1}`);
      const statePool = pool;
      const stateOf = (index: number) => statePool.state(index);
      let first = await stateOf(0);
      for (let i = 0; i < 100 && first.leader === null; i++) {
        await sleep(50);
        first = await stateOf(0);
      }
      expect(first.leader).not.toBeNull();
      const leaderIndex = names.indexOf(first.leader as string);
      const targetIndex = role === 'leader' ? leaderIndex : (leaderIndex + 1) % 3;
      const target = gateways[targetIndex]!;
      const observer = (targetIndex + 1) % 3; // a replica that stays

      const client = new RetryingClient(gateways.map((g) => g.url));
      const stop = { now: false };
      const deadline = performance.now() + 30_000;
      const workers = Array.from({ length: WORKERS }, async () => {
        for (let n = 0; n < 2_000 && !stop.now && performance.now() < deadline; n++) {
          await client.request();
        }
      });
      await sleep(1_500);
      // 600 tokens at 10 ms an iteration: ~6 s, longer than the drain timeout.
      const probe = probeStream(target.url, 600);
      await probe.streaming;
      await sleep(300);
      const completedBefore = client.completed;

      const signalledAt = performance.now();
      process.kill(target.pid, 'SIGTERM');
      const exited = target.exit.then((exit) => ({ ...exit, ms: performance.now() - signalledAt }));

      // Who leads, as a surviving replica sees it, until the drained one has exited.
      let newLeaderMs: number | undefined;
      let newLeader: string | null = null;
      const leaders = new Set<string>();
      while (!target.exited && performance.now() - signalledAt < (DRAIN_TIMEOUT_S + 4) * 1_000) {
        const state = await stateOf(observer).catch(() => undefined);
        if (state?.leader) leaders.add(state.leader);
        if (newLeaderMs === undefined && state?.leader && state.leader !== first.leader) {
          newLeaderMs = performance.now() - signalledAt;
          newLeader = state.leader;
        }
        await sleep(20);
      }
      const exit = await exited;
      // Load goes on a while on the two replicas left.
      await sleep(1_500);
      stop.now = true;
      await Promise.all(workers);
      const probed = await probe.ended;

      const logs = target.logs();
      const drainedLine = logs.split('\n').find((line) => line.includes('drained replica')) ?? '';
      console.log(
        `${role} ${names[targetIndex]} drained: exit ${exit.code} after ${exit.ms.toFixed(0)} ms (drain timeout ${DRAIN_TIMEOUT_S} s); ` +
          `${role === 'leader' ? `new leader ${newLeader} after ${newLeaderMs?.toFixed(0)} ms (lease TTL ${LEASE_TTL_MS} ms)` : `leaders seen ${[...leaders].join(', ')}`}; ` +
          `client: ${client.completed} completed (${client.completed - completedBefore} after the signal), ${client.failed.length} failed, ${client.retried503} retried after 503, ${client.retriedRefused} after a refused connection; ` +
          `probe ${probed.status} ended after ${probed.ms.toFixed(0)} ms; log: ${drainedLine}`,
      );

      expect(client.failed).toEqual([]);
      expect(client.completed - completedBefore).toBeGreaterThan(50);
      expect(exit.code).toBe(0);
      expect(exit.ms).toBeLessThan((DRAIN_TIMEOUT_S + 2) * 1_000);
      // The probe outlived the drain timeout: aborted with an SSE error, not cut off silently.
      expect(probed.status).toBe(200);
      expect(probed.body).toContain('"code":"draining"');
      expect(probed.ms).toBeGreaterThan(DRAIN_TIMEOUT_S * 1_000);
      expect(logs.match(/draining replica/g)).toHaveLength(1);
      expect(drainedLine).toMatch(/1 aborted \(drain timeout\)/);
      if (role === 'leader') {
        expect(newLeader).not.toBeNull();
        expect(newLeader).not.toBe(first.leader);
        expect(newLeaderMs).toBeLessThan(1_000);
      } else {
        expect([...leaders]).toEqual([first.leader]);
      }
      const final = await expectConserved(pool, 10_000, observer);
      expect(final.inflight).toBe(0);
      if (role === 'follower') expect(final.epoch).toBe(first.epoch);
    }, 60_000);
  },
);

describe('a second SIGTERM ends the drain at once (one gateway process, embedded scheduler)', () => {
  afterAll(async () => {
    await stopAll();
  });

  it('aborts the in-flight stream and exits long before the drain timeout', async () => {
    const sim = await startSim({
      args: { 'alpha-ms': 10, 'beta-ms': 0, 'gamma-ms': 0, model: SIM_MODEL },
    });
    const config = writeGatewayConfig({
      pods: [{ name: 'pod-a', url: sim.url }],
      sections: { shutdown: { drain_timeout_s: 30 } },
    });
    const gateway = await startGatewayProcess({ config, replicaId: 'twice' });
    const probe = probeStream(gateway.url, 600);
    await probe.streaming;
    await sleep(300);
    const signalledAt = performance.now();
    process.kill(gateway.pid, 'SIGTERM');
    await sleep(300);
    const ready = await fetch(`${gateway.url}/readyz`);
    expect(ready.status).toBe(503);
    expect(gateway.exited).toBe(false); // still draining: the stream runs
    process.kill(gateway.pid, 'SIGTERM');
    const exit = await gateway.exit;
    const exitMs = performance.now() - signalledAt;
    const probed = await probe.ended;
    console.log(
      `second SIGTERM: exit ${exit.code} ${exitMs.toFixed(0)} ms after the first (drain timeout 30 s); probe ended after ${probed.ms.toFixed(0)} ms`,
    );
    expect(exit.code).toBe(0);
    expect(exitMs).toBeLessThan(2_000);
    expect(probed.body).toContain('"code":"draining"');
    expect(gateway.logs()).toMatch(/SIGTERM during the drain: ending it now/);
    expect(gateway.logs()).toMatch(/drained replica twice .* 1 aborted \(second signal\)/);
  }, 30_000);
});
