import { afterEach, beforeEach, describe, expect } from 'vitest';
import type { Backend } from '../support/backends.js';
import { TestPool } from '../support/pool.js';
import { admissionPolicies } from './admission.js';
import { capsAndQuotas } from './caps.js';
import { controlPlane } from './control.js';
import { discoveredPods } from './discovery.js';
import { dispatchOrders } from './dispatch-order.js';
import { inflightEviction } from './eviction.js';
import { fairness } from './fairness.js';
import { saturationGating } from './gating.js';
import { lifecycle } from './lifecycle.js';
import { tenantLimits } from './limits.js';
import { liveness } from './liveness.js';
import { loraRouting } from './lora.js';
import { podLoad } from './pod-load.js';
import { prefixRouting } from './prefix.js';
import { slotRecycling } from './recycling.js';
import { replicas } from './replicas.js';
import { queueShedding } from './shedding.js';
import { tokenBuckets } from './token-bucket.js';
import { tokenFairness } from './token-fairness.js';
import { usageMetering } from './usage.js';

export type GetPool = () => TestPool;
export type GetBackend = () => Backend;

/**
 * The scheduler contract, run against one implementation. Every test gets a fresh pool and
 * must leave it with nothing in flight or waiting, the conservation identities holding and
 * no per-request state behind.
 */
export function describeSchedulerConformance(getBackend: GetBackend): void {
  let pool: TestPool | undefined;
  const getPool: GetPool = () => {
    if (!pool) throw new Error('no pool: beforeEach did not run');
    return pool;
  };

  beforeEach(() => {
    pool = new TestPool(getBackend().newPool());
  });

  afterEach(async () => {
    const problems = await getPool().finish();
    pool = undefined;
    expect(problems).toEqual([]);
  });

  describe('fairness and ordering', () => fairness(getPool));
  describe('fairness in tokens', () => tokenFairness(getPool));
  describe('caps and quotas', () => capsAndQuotas(getPool));
  describe('request lifecycle', () => lifecycle(getPool));
  describe('leases and liveness', () => liveness(getPool));
  describe('several replicas', () => replicas(getPool));
  describe('leadership, control and latency', () => controlPlane(getPool));
  describe('dispatch orders', () => dispatchOrders(getPool));
  describe('admission policies', () => admissionPolicies(getPool));
  describe('token buckets', () => tokenBuckets(getPool));
  describe('budgets and rates', () => tenantLimits(getPool));
  describe('pod load, saturation and leader data', () => podLoad(getPool));
  describe('saturation gating', () => saturationGating(getPool));
  describe('queue shedding', () => queueShedding(getPool));
  describe('in-flight eviction', () => inflightEviction(getPool));
  describe('prefix-aware pod choice', () => prefixRouting(getPool));
  describe('LoRA-aware pod choice', () => loraRouting(getPool));
  describe('slot recycling', () => slotRecycling(getPool));
  describe('discovered pods', () => discoveredPods(getPool));
  describe('usage metering', () => usageMetering(getPool));
}
