import { sha256Hex, TEST_KEYS } from '@fairgate/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  expectConserved,
  type GenerateOptions,
  type GenerateResult,
  generate,
  type Pool,
  startPool,
  waitUntilPool,
} from './support/pool.js';

/**
 * The three dispatch orders, through two replicas: the budget is 1, a long request holds
 * it, labelled requests queue behind it in a known arrival order (alternating replicas; each
 * is sent once the previous one is seen waiting in the pool, so a slow hop under a loaded
 * CPU cannot swap two arrivals), and since only one runs at a time the order they finish in
 * is the order they were dispatched in.
 */
interface Labelled extends GenerateOptions {
  label: string;
  key?: string;
}

/**
 * The order is what is checked, not Redis latency: with the default 250 ms command bound, a
 * stall of the CPU-starved CI machine (a Sentinel failover beside this file) counted as a
 * Redis outage and answered /admin/state 503.
 */
const SLOW_MACHINE_REDIS = { command_timeout_ms: 2_000 };

async function dispatchOrder(pool: Pool, requests: Labelled[]): Promise<string[]> {
  const url = (i: number) => pool.gateways[i % pool.gateways.length]!.url;
  const blocker = generate(url(0), TEST_KEYS.paying, { maxTokens: 40 });
  await waitUntilPool(pool, 1, 'inflight'); // the blocker holds the only slot
  const finished: Array<{ label: string; result: GenerateResult }> = [];
  const pending: Promise<void>[] = [];
  for (const [i, { label, key, ...options }] of requests.entries()) {
    pending.push(
      generate(url(i + 1), key ?? TEST_KEYS.paying, options).then((result) => {
        finished.push({ label, result });
      }),
    );
    await waitUntilPool(pool, i + 1);
  }
  await Promise.all([blocker, ...pending]);
  for (const { label, result } of finished) {
    if (result.status !== 200) throw new Error(`${label} answered ${result.status}`);
  }
  return finished.map((f) => f.label);
}

function tenants() {
  return [
    {
      id: 'paying',
      api_key_sha256: [sha256Hex(TEST_KEYS.paying)],
      default_class: 'standard',
      max_class: 'critical',
      queue_max: 100,
    },
    {
      id: 'free',
      api_key_sha256: [sha256Hex(TEST_KEYS.free)],
      default_class: 'standard',
      queue_max: 100,
    },
  ];
}

const MIXED: Labelled[] = [
  { label: 'batch-1', sloClass: 'batch' },
  { label: 'standard-1' },
  { label: 'critical-1', sloClass: 'critical' },
  { label: 'batch-2', sloClass: 'batch' },
  { label: 'standard-2' },
];

describe.each([
  ['priority', ['critical-1', 'standard-1', 'standard-2', 'batch-1', 'batch-2']],
  ['fifo', ['batch-1', 'standard-1', 'critical-1', 'batch-2', 'standard-2']],
])('dispatch_order %s', (order, expected) => {
  let pool: Pool;
  beforeAll(async () => {
    pool = await startPool({
      sims: [{}],
      podCap: 1,
      budget: 1,
      tenants: tenants(),
      scheduler: { dispatch_order: order, queue_ttl_ms: 10_000 },
      redis: SLOW_MACHINE_REDIS,
    });
  }, 60_000);
  afterAll(async () => pool?.stop());

  it(`serves classes in ${order} order`, async () => {
    const served = await dispatchOrder(pool, MIXED);
    console.log(`${order}: ${served.join(', ')}`);
    expect(served).toEqual(expected);
    await expectConserved(pool);
  }, 30_000);
});

describe('dispatch_order slo-deadline', () => {
  let pool: Pool;
  beforeAll(async () => {
    pool = await startPool({
      sims: [{}],
      podCap: 1,
      budget: 1,
      tenants: tenants(),
      scheduler: {
        dispatch_order: 'slo-deadline',
        queue_ttl_ms: 10_000,
        // A request without x-slo-ttft-ms gets its class's target as its deadline.
        slo_targets_ms: { standard: 2_500 },
      },
      redis: SLOW_MACHINE_REDIS,
    });
  }, 60_000);
  afterAll(async () => pool?.stop());

  it('serves the earliest deadline first inside a flow (header, then class target)', async () => {
    const served = await dispatchOrder(pool, [
      { label: 'ttft-5000', ttftMs: 5_000 },
      { label: 'class-target-2500' },
      { label: 'ttft-1000', ttftMs: 1_000 },
      { label: 'ttft-4000', ttftMs: 4_000 },
    ]);
    console.log(`slo-deadline: ${served.join(', ')}`);
    expect(served).toEqual(['ttft-1000', 'class-target-2500', 'ttft-4000', 'ttft-5000']);
    await expectConserved(pool);
  }, 30_000);

  it('keeps priority bands above deadlines', async () => {
    const served = await dispatchOrder(pool, [
      { label: 'batch-urgent', sloClass: 'batch', ttftMs: 100 },
      { label: 'standard-late', ttftMs: 9_000 },
    ]);
    expect(served).toEqual(['standard-late', 'batch-urgent']);
    await expectConserved(pool);
  }, 30_000);
});
