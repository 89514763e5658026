import { sha256Hex, TEST_KEYS } from '@fairgate/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectClientsAndSimsAgree, ledger } from './support/ledger.js';
import { dropsOf, expectConserved, generate, type Pool, startPool } from './support/pool.js';

/**
 * Admission policies decided in the enqueue script on the pool's shared load, through two
 * replicas: tier-shed on the most loaded pod's in-flight + waiting, gaie-legacy on the pool
 * saturation the leader scrapes from the pods' vLLM metrics, reject-all.
 */
const tenants = [
  {
    id: 'paying',
    api_key_sha256: [sha256Hex(TEST_KEYS.paying)],
    default_class: 'standard',
    max_class: 'critical',
    queue_max: 100,
  },
];

/** Starts `count` long standard requests (alternating replicas) and returns their promise. */
function hold(pool: Pool, count: number, maxTokens: number) {
  return Promise.all(
    Array.from({ length: count }, (_, i) =>
      generate(pool.gateways[i % 2]!.url, TEST_KEYS.paying, { maxTokens }),
    ),
  );
}

describe('tier-shed', () => {
  let pool: Pool;
  beforeAll(async () => {
    pool = await startPool({
      tenants,
      budget: 64,
      sections: {
        admission: { policy: 'tier-shed', tier_shed_threshold: 2, tier_shed_min_priority: 3 },
      },
    });
  }, 60_000);
  afterAll(async () => pool?.stop());

  it('admits every class under the threshold and sheds classes below the minimum above it', async () => {
    const before = await ledger(pool);
    const idle = await generate(pool.gateways[1]!.url, TEST_KEYS.paying, { sloClass: 'batch' });
    expect([idle.status, idle.dropReason]).toEqual([200, null]);

    const held = hold(pool, 8, 60); // 4 per pod > threshold 2, for ~600 ms
    // Until all 8 hold their slots (a fixed pause was too short on a loaded machine).
    await expect
      .poll(async () => (await pool.state()).inflight, { timeout: 5_000, interval: 5 })
      .toBe(8);
    const [batch, sheddable, standard, critical] = await Promise.all(
      ['batch', 'sheddable', 'standard', 'critical'].map((sloClass, i) =>
        generate(pool.gateways[i % 2]!.url, TEST_KEYS.paying, { sloClass }),
      ),
    );
    expect([batch!.status, batch!.dropReason]).toEqual([429, 'shed_by_tier']);
    expect([sheddable!.status, sheddable!.dropReason]).toEqual([429, 'shed_by_tier']);
    expect(standard!.status).toBe(200);
    expect(critical!.status).toBe(200);
    const heldAnswers = await held;
    expect(heldAnswers.every((r) => r.status === 200)).toBe(true);

    // Overload ends when a scrape shows the pods drained (the signal lags by up to a scrape).
    await expect
      .poll(
        async () => {
          const { pods } = await pool.state();
          return Math.max(
            ...pods.map((p) => p.inflight + (p.load ? p.load.running + p.load.waiting : 0)),
          );
        },
        { timeout: 5_000 },
      )
      .toBe(0);
    const after = await generate(pool.gateways[0]!.url, TEST_KEYS.paying, { sloClass: 'batch' });
    expect(after.status).toBe(200);
    await expectClientsAndSimsAgree(pool, before, [
      idle,
      ...heldAnswers,
      batch!,
      sheddable!,
      standard!,
      critical!,
      after,
    ]);
    const state = await pool.state();
    expect(dropsOf(state, 'shed_by_tier')).toBe(2);
    const byClass = state.drops.filter((d) => d.reason === 'shed_by_tier').map((d) => d.class);
    expect(byClass.sort()).toEqual(['batch', 'sheddable']);
  }, 30_000);
});

describe('gaie-legacy', () => {
  let pool: Pool;
  beforeAll(async () => {
    pool = await startPool({
      // One running sequence per pod: everything else waits inside the pod (vLLM's queue).
      sims: [{ 'max-num-seqs': 1 }, { 'max-num-seqs': 1 }],
      tenants,
      budget: 64,
      sections: {
        admission: { policy: 'gaie-legacy' },
        saturation: { queue_depth_threshold: 5 },
      },
    });
  }, 60_000);
  afterAll(async () => pool?.stop());

  it('refuses sheddable classes while the scraped pool saturation is >= 1, never standard', async () => {
    await expect
      .poll(async () => (await pool.state()).saturation, { timeout: 15_000 })
      .toBeLessThan(0.5);
    const idle = await generate(pool.gateways[0]!.url, TEST_KEYS.paying, { sloClass: 'sheddable' });
    expect(idle.status).toBe(200);

    // 22 requests of ~400 ms: one runs and ten wait in each pod -> saturation 10/5 = 2, still
    // >= 1 after five of them ended (~2 s): room for a poll and three requests on a loaded VM
    // (with 1.6, ~900 ms, a pod's queue once fell below the threshold before they came).
    const held = hold(pool, 22, 40);
    await expect
      .poll(async () => (await pool.state()).saturation, { timeout: 3_000, interval: 20 })
      .toBeGreaterThanOrEqual(1);
    const [sheddable, batch, standard] = await Promise.all(
      ['sheddable', 'batch', 'standard'].map((sloClass, i) =>
        generate(pool.gateways[i % 2]!.url, TEST_KEYS.paying, { sloClass }),
      ),
    );
    expect([sheddable!.status, sheddable!.dropReason]).toEqual([429, 'saturated']);
    expect([batch!.status, batch!.dropReason]).toEqual([429, 'saturated']);
    expect(standard!.status).toBe(200);
    expect((await held).every((r) => r.status === 200)).toBe(true);

    await expect
      .poll(async () => (await pool.state()).saturation, { timeout: 15_000 })
      .toBeLessThan(0.5);
    const after = await generate(pool.gateways[1]!.url, TEST_KEYS.paying, {
      sloClass: 'sheddable',
    });
    expect(after.status).toBe(200);
    const state = await expectConserved(pool);
    expect(dropsOf(state, 'saturated')).toBe(2);
  }, 60_000);
});

describe('reject-all', () => {
  let pool: Pool;
  beforeAll(async () => {
    pool = await startPool({
      sims: [{}],
      replicas: 1,
      tenants,
      sections: { admission: { policy: 'reject-all' } },
    });
  }, 60_000);
  afterAll(async () => pool?.stop());

  it('refuses every class with 429 rejected_by_policy and counts it', async () => {
    for (const sloClass of ['critical', 'standard', 'batch']) {
      const result = await generate(pool.gateways[0]!.url, TEST_KEYS.paying, { sloClass });
      expect([result.status, result.dropReason]).toEqual([429, 'rejected_by_policy']);
    }
    const state = await expectConserved(pool);
    expect(dropsOf(state, 'rejected_by_policy', 'paying')).toBe(3);
  });
});
