import { defaultTestTenants, TEST_KEYS } from '@fairgate/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  expectConserved,
  generate,
  type Pool,
  sleep,
  startPool,
  tenantTotal,
} from './support/pool.js';

/**
 * A replica killed mid-request never releases its lease; the leader's janitor
 * (apps/gateway/src/control/janitor-loop.ts, every scheduler.heartbeat_ms) reclaims it once
 * it lapses, with no request waiting anywhere in the pool (poll, which also runs the
 * janitor, ticks only while something waits, so nothing else would free the budget).
 *
 * The dead replica last extended its lease at most one heartbeat before the kill, so the
 * lease lapses between lease_ttl_ms - heartbeat_ms and lease_ttl_ms after it, and the
 * leader reclaims it within one janitor period of that.
 */
const LEASE_TTL_MS = 2_000;
const HEARTBEAT_MS = 250;
/** Process scheduling, the admin-state polling period and a Redis round trip. */
const MARGIN_MS = 400;

describe('janitor on the leader (2 gateway processes, 1 sim)', () => {
  let pool: Pool;

  beforeAll(async () => {
    pool = await startPool({
      replicas: 2,
      // 10 ms per engine iteration: a 1,000-token stream runs for about 10 s.
      sims: [{ 'alpha-ms': 10, 'beta-ms': 0, 'gamma-ms': 0 }],
      tenants: defaultTestTenants(),
      scheduler: { lease_ttl_ms: LEASE_TTL_MS, heartbeat_ms: HEARTBEAT_MS },
    });
  }, 60_000);

  afterAll(async () => {
    await pool?.stop();
  });

  it("frees a SIGKILLed replica's lease within lease_ttl_ms + one janitor period, with no traffic", async () => {
    // Both replicas must agree on the leader before one of them is chosen as the victim.
    let leader: string | null = null;
    for (let i = 0; i < 100 && leader === null; i += 1) {
      leader = (await pool.state(0)).leader;
      if (leader === null) await sleep(50);
    }
    expect(leader).not.toBeNull();
    const leaderIndex = leader === 'replica-1' ? 0 : 1;
    const victimIndex = 1 - leaderIndex;
    const victim = pool.gateways[victimIndex]!;

    // One long stream through the follower; it holds the only lease in the pool.
    const aborted = new AbortController();
    const stream = generate(victim.url, TEST_KEYS.paying, {
      stream: true,
      maxTokens: 1_000,
      signal: aborted.signal,
    });
    let state = await pool.state(leaderIndex);
    for (let i = 0; i < 100 && state.inflight !== 1; i += 1) {
      await sleep(20);
      state = await pool.state(leaderIndex);
    }
    expect(state.inflight).toBe(1);
    expect(state.waiting).toBe(0);
    await sleep(3 * HEARTBEAT_MS); // mid-stream, after a few of the victim's heartbeats

    const killedAt = performance.now();
    await victim.kill();
    const result = await stream;
    aborted.abort();
    // The client saw the stream cut, not a completed response.
    expect(result.body).not.toContain('[DONE]');

    // No other traffic: only /admin/state reads (a no-writes snapshot) from here on.
    const bound = LEASE_TTL_MS + HEARTBEAT_MS + MARGIN_MS;
    let freedAfterMs = Number.NaN;
    while (performance.now() - killedAt < bound + 2_000) {
      state = await pool.state(leaderIndex);
      expect(state.waiting).toBe(0);
      if (state.inflight === 0) {
        freedAfterMs = performance.now() - killedAt;
        break;
      }
      await sleep(25);
    }
    console.log(
      `lease freed ${freedAfterMs.toFixed(0)} ms after the kill (lease_ttl_ms ${LEASE_TTL_MS}, janitor every ${HEARTBEAT_MS} ms, bound ${bound} ms)`,
    );
    expect(freedAfterMs).toBeLessThanOrEqual(bound);
    // The lease was held until it lapsed: nothing but the janitor freed it.
    expect(freedAfterMs).toBeGreaterThanOrEqual(LEASE_TTL_MS - HEARTBEAT_MS - 50);
    expect(state.leader).toBe(leader);

    const final = await expectConserved(pool, 5_000, leaderIndex);
    const sum = (pick: Parameters<typeof tenantTotal>[2]) => tenantTotal(final, 'paying', pick);
    expect(sum((c) => c.admitted)).toBe(1);
    expect(sum((c) => c.outcomes.evicted)).toBe(1);
    expect(sum((c) => c.outcomes.completed)).toBe(0);
  }, 60_000);
});
