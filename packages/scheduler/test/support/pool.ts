import { conservationViolations } from '@fairgate/core';
import type {
  EnqueueRequest,
  EnqueueResult,
  Notice,
  PodConfig,
  Scheduler,
  SchedulerSettings,
  TenantConfig,
} from '../../src/index.js';
import type { PoolBackend } from './backends.js';

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export interface PoolSetup {
  settings?: Partial<SchedulerSettings>;
  tenants?: TenantConfig[];
  pods?: PodConfig[];
}

/**
 * A test's view of one fresh pool: configures it, enqueues through per-replica handles while
 * remembering every id, and at the end ends what is still live and checks the invariants
 * every test must leave behind (nothing in flight or waiting, conservation, no leaks).
 */
export class TestPool {
  readonly ids = new Set<string>();
  readonly replicas = new Set<string>(['r1']);
  readonly tenantOf = new Map<string, string>();

  constructor(private readonly backend: PoolBackend) {}

  /** The handle of replica `replica` (r1 by default): configuration, snapshots. */
  on(replica = 'r1'): Scheduler {
    this.replicas.add(replica);
    return this.backend.connect(replica);
  }

  async setup({ settings = {}, tenants = [], pods }: PoolSetup): Promise<void> {
    const scheduler = this.on();
    await scheduler.configure(settings);
    await scheduler.upsertTenants(tenants);
    await scheduler.upsertPods(pods ?? [{ name: 'pod-a', cap: 10_000 }]);
  }

  /** Enqueue through the request's replica; band 0 and replica r1 unless given. */
  async enqueue(
    request: Omit<EnqueueRequest, 'band' | 'replica'> & Partial<EnqueueRequest>,
  ): Promise<EnqueueResult> {
    const full = { band: 0, replica: 'r1', ...request };
    this.ids.add(full.id);
    this.tenantOf.set(full.id, full.tenant);
    return this.on(full.replica).enqueue(full);
  }

  /**
   * Polls until `count` grant notices arrived (other notices are returned too), heartbeating
   * the granted ones as a gateway does, so they keep their leases while it waits.
   */
  async pollFor(replica: string, count: number, timeoutMs = 10_000): Promise<Notice[]> {
    const deadline = Date.now() + timeoutMs;
    const seen: Notice[] = [];
    const granted = () => seen.flatMap((n) => (n.kind === 'grant' ? [n.id] : []));
    while (granted().length < count) {
      if (Date.now() > deadline) {
        throw new Error(
          `timed out waiting for ${count} grants on ${replica}: ${JSON.stringify(seen)}`,
        );
      }
      const notices = await this.on(replica).poll(replica);
      seen.push(...notices);
      await this.on(replica).heartbeat(replica, granted());
      if (notices.length === 0) await sleep(2);
    }
    return seen;
  }

  /** Releases `id` as completed and returns the ids granted by the pass it triggered. */
  async releaseAndCollect(id: string, replica = 'r1'): Promise<string[]> {
    await this.on(replica).release(id, { outcome: 'completed' });
    const notices = await this.on(replica).poll(replica);
    return notices.flatMap((n) => (n.kind === 'grant' ? [n.id] : []));
  }

  /** Cancels every tracked request still live, drains notices, and checks the invariants. */
  async finish(): Promise<string[]> {
    const problems: string[] = [];
    const scheduler = this.on();
    if ((await scheduler.snapshot()).settings) {
      for (const id of this.ids) await scheduler.cancel(id);
      for (const replica of this.replicas) await this.on(replica).poll(replica);
    }
    const snapshot = await scheduler.snapshot();
    if (snapshot.inflight !== 0) problems.push(`inflight ${snapshot.inflight}`);
    if (snapshot.waiting !== 0) problems.push(`waiting ${snapshot.waiting}`);
    for (const t of snapshot.tenants) {
      if (t.inflight !== 0 || t.waiting !== 0 || t.kvBlocks !== 0) {
        problems.push(`tenant ${t.tenant}: ${JSON.stringify(t)}`);
      }
    }
    for (const pod of snapshot.pods) if (pod.inflight !== 0) problems.push(`pod ${pod.name} busy`);
    problems.push(...conservationViolations(snapshot.counters, 0));
    problems.push(...(await this.backend.perRequestResidue()));
    await this.backend.close();
    return problems;
  }
}
