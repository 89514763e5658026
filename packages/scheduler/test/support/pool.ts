import { conservationViolations } from '@fairgate/core';
import type {
  EnqueueRequest,
  EnqueueResult,
  Fence,
  HandoverResult,
  Notice,
  PodConfig,
  PodLoadReport,
  ReleaseOptions,
  Scheduler,
  SchedulerSettingsInput,
  TenantConfig,
} from '../../src/index.js';
import type { PoolBackend } from './backends.js';

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * `count` whole request cycles (enqueue, poll, heartbeat, release) of replica `r<index>`
 * through `scheduler`, tenants a and b 2:1, with `afterEach(i)` after each one (where a
 * test injects its fault). A failed call is collected in `errors`, and the run goes on.
 */
export async function requestCycles(
  scheduler: Scheduler,
  index: number,
  count: number,
  errors: unknown[],
  afterEach: (i: number) => Promise<void> = async () => {},
): Promise<void> {
  const replica = `r${index}`;
  for (let i = 0; i < count; i += 1) {
    const id = `w${index}-${i}`;
    try {
      await scheduler.enqueue({ id, tenant: i % 3 ? 'a' : 'b', band: 0, replica });
      await scheduler.poll(replica);
      await scheduler.heartbeat(replica, [id]);
      await scheduler.release(id, { outcome: 'completed' });
    } catch (error) {
      errors.push(error);
    }
    await afterEach(i);
  }
}

export interface PoolSetup {
  settings?: SchedulerSettingsInput;
  tenants?: TenantConfig[];
  pods?: PodConfig[];
}

/** A notice as a short string: `grant|<id>|<pod>`, else `<kind>|<id>`. */
const noticeText = (n: Notice): string =>
  n.kind === 'grant' ? `grant|${n.id}|${n.pod}` : `${n.kind}|${n.id}`;

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

  /** Hands `from`'s slot to `request` (slot recycling) through the request's replica. */
  async handover(
    from: string,
    request: Omit<EnqueueRequest, 'band' | 'replica'> & Partial<EnqueueRequest>,
    options: ReleaseOptions = { outcome: 'completed' },
  ): Promise<HandoverResult> {
    const full = { band: 0, replica: 'r1', ...request };
    this.ids.add(full.id);
    this.tenantOf.set(full.id, full.tenant);
    return this.on(full.replica).handover(from, options, full);
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

  /** Takes the leader lease for replica 'leader' and returns its fence. */
  async lead(): Promise<Fence> {
    const result = await this.on().acquireLeadership('leader', 600_000);
    if (!result.leader) throw new Error(`leadership held by ${result.holder}`);
    return { replica: 'leader', epoch: result.epoch };
  }

  /** Reports pod loads as the leader (fields not given are 0), asserting the write took. */
  async report(fence: Fence, loads: (Partial<PodLoadReport> & { pod: string })[]): Promise<void> {
    const full = loads.map((load) => ({ waiting: 0, running: 0, kvUtilization: 0, ...load }));
    if (!(await this.on().reportPodLoad(fence, full))) throw new Error('stale fence');
  }

  /** Notices of `replica` as wire-like strings ('grant|id|pod', 'evict|id', ...). */
  async notices(replica = 'r1'): Promise<string[]> {
    return (await this.on(replica).poll(replica)).map(noticeText);
  }

  /** The notices already made for `replica`, popped without a pass (the blocking wait's way). */
  async popped(replica = 'r1'): Promise<string[]> {
    return (await this.on(replica).waitForNotices(replica, 1)).map(noticeText);
  }

  /** Outcome result as a short string: the pod when granted, 'queued', or the reject code. */
  async admit(
    request: Omit<EnqueueRequest, 'band' | 'replica'> & Partial<EnqueueRequest>,
  ): Promise<string> {
    const result = await this.enqueue(request);
    if (result.status === 'granted') return result.pod;
    return result.status === 'queued' ? 'queued' : result.code;
  }

  /** The snapshot row of `tenant`. */
  async tenant(tenant: string) {
    const row = (await this.on().snapshot()).tenants.find((t) => t.tenant === tenant);
    if (!row) throw new Error(`no tenant ${tenant}`);
    return row;
  }

  /** Counters summed over classes for `tenant`. */
  async counters(tenant: string) {
    const rows = (await this.on().snapshot()).counters.filter((c) => c.tenant === tenant);
    const rejected: Record<string, number> = {};
    const outcomes: Record<string, number> = {};
    let shed = 0;
    for (const row of rows) {
      shed += row.shed;
      for (const [code, n] of Object.entries(row.rejected))
        rejected[code] = (rejected[code] ?? 0) + (n ?? 0);
      for (const [outcome, n] of Object.entries(row.outcomes)) {
        if (n > 0) outcomes[outcome] = (outcomes[outcome] ?? 0) + n;
      }
    }
    return { rejected, outcomes, shed };
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
