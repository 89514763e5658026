import { chance, pick, type Rng, uniformInt } from '@fairgate/runtime';
import type {
  EnqueueRequest,
  Fence,
  Notice,
  PodAdapterReport,
  PodConfig,
  PodLoadReport,
  ReleaseOptions,
  Scheduler,
  SchedulerSettingsInput,
  TenantConfig,
} from '../../src/index.js';

/** One step of a differential run: plain data, so a failing run prints as a replayable log. */
export type Operation =
  | { op: 'enqueue'; request: EnqueueRequest }
  | { op: 'poll'; replica: string }
  | { op: 'release'; id: string; options: ReleaseOptions }
  | { op: 'cancel'; id: string }
  | { op: 'handover'; from: string; options: ReleaseOptions; request: EnqueueRequest }
  | { op: 'heartbeat'; replica: string; ids: string[] }
  | { op: 'reclaim' }
  | { op: 'advance'; ms: number }
  | { op: 'kill'; replica: string }
  | { op: 'revive'; replica: string }
  | { op: 'configure'; settings: SchedulerSettingsInput }
  | { op: 'upsertTenants'; tenants: TenantConfig[] }
  | { op: 'upsertPods'; pods: PodConfig[] }
  | { op: 'setBudget'; budget: number }
  | { op: 'reportPodLoad'; loads: PodLoadReport[] }
  | { op: 'reportPodAdapters'; reports: PodAdapterReport[]; keepClaimsMs: number }
  | { op: 'dropPodAdapter'; pod: string; adapter: string }
  | { op: 'snapshot' };

/** The leader used for fenced budget writes: a lease far longer than any run, on both clocks. */
export const CONTROLLER = 'ctl';
export const LEADER_TTL_MS = 86_400_000;

const BANDS = [-2, -1, 0, 1, 2];
const CLASSES = ['standard', 'batch'];
const OUTCOMES = ['completed', 'cancelled', 'evicted', 'upstream_error'] as const;
/** LoRA adapters requests ask for and pods hold: few, so requests meet their holders. */
const ADAPTERS = ['x', 'y', 'z', 'w'];

/** What the generator knows of a request, learned from the (agreeing) results. */
interface Tracked {
  request: EnqueueRequest;
  state: 'granted' | 'queued' | 'ended';
}

/**
 * Generates operations from what the engines have answered so far (both answered the same,
 * or the run already stopped), so each operation is likely to hit live state.
 */
export class Generator {
  readonly replicas: string[];
  private readonly dead = new Set<string>();
  private readonly requests = new Map<string, Tracked>();
  private live: string[] = [];
  private serial = 0;
  readonly tenants: TenantConfig[];
  pods: PodConfig[];

  constructor(private readonly rng: Rng) {
    this.replicas = Array.from({ length: uniformInt(rng, 2, 4) }, (_, i) => `r${i}`);
    this.tenants = Array.from({ length: uniformInt(rng, 2, 5) }, (_, i) =>
      randomTenant(rng, `t${i}`),
    );
    this.pods = Array.from({ length: uniformInt(rng, 1, 3) }, (_, i) => randomPod(rng, `p${i}`));
  }

  /** The setup every run starts with (not part of the random sequence). */
  setup(): Operation[] {
    return [
      { op: 'configure', settings: randomSettings(this.rng) },
      { op: 'upsertTenants', tenants: this.tenants },
      { op: 'upsertPods', pods: this.pods },
    ];
  }

  next(): Operation {
    const rng = this.rng;
    const roll = rng.next();
    const alive = this.replicas.filter((r) => !this.dead.has(r));
    const replica = pick(rng, alive.length > 0 ? alive : this.replicas);
    if (roll < 0.36) return { op: 'enqueue', request: this.enqueue(replica) };
    if (roll < 0.52) return { op: 'poll', replica };
    if (roll < 0.56) return this.handover();
    if (roll < 0.68) return { op: 'release', id: this.target('granted'), options: this.release() };
    if (roll < 0.72) return { op: 'cancel', id: this.target(chance(rng, 0.5) ? 'queued' : 'any') };
    if (roll < 0.8) return { op: 'heartbeat', replica, ids: this.heldBy(replica) };
    if (roll < 0.9)
      return {
        op: 'advance',
        ms: chance(rng, 0.8) ? uniformInt(rng, 1, 120) : uniformInt(rng, 200, 2_500),
      };
    if (roll < 0.92) return { op: 'reclaim' };
    if (roll < 0.94) {
      const victim = pick(rng, this.replicas);
      return this.dead.has(victim)
        ? { op: 'revive', replica: victim }
        : { op: 'kill', replica: victim };
    }
    if (roll < 0.95) return { op: 'configure', settings: randomSettings(rng) };
    if (roll < 0.96) return { op: 'upsertTenants', tenants: this.tenantChange() };
    if (roll < 0.97) return { op: 'upsertPods', pods: this.podChange() };
    if (roll < 0.975) return { op: 'setBudget', budget: uniformInt(rng, 0, 10) };
    if (roll < 0.985) return { op: 'reportPodLoad', loads: this.podLoads() };
    if (roll < 0.993) {
      // Keep a grant's claims (ms), or drop the older ones: 0 drops every claim.
      const keepClaimsMs = pick(rng, [0, 200, 60_000]);
      return { op: 'reportPodAdapters', reports: this.podAdapters(), keepClaimsMs };
    }
    if (roll < 0.995) {
      return {
        op: 'dropPodAdapter',
        pod: pick(rng, this.pods).name,
        adapter: pick(rng, ADAPTERS),
      };
    }
    return { op: 'snapshot' };
  }

  /** Learns from an operation's (agreed) result. */
  observe(operation: Operation, result: unknown): void {
    switch (operation.op) {
      case 'enqueue': {
        const r = result as { status?: string };
        const id = operation.request.id;
        if (r.status === 'granted' || r.status === 'queued') {
          if (!this.requests.has(id)) this.live.push(id);
          this.requests.set(id, { request: operation.request, state: r.status });
        }
        break;
      }
      case 'poll':
        for (const notice of result as Notice[] | { error: unknown } as Notice[]) {
          const tracked = this.requests.get(notice.id);
          if (tracked) tracked.state = notice.kind === 'grant' ? 'granted' : 'ended';
        }
        break;
      case 'release':
      case 'cancel':
        this.end(operation.id);
        break;
      case 'handover':
        if ((result as { handedOver?: boolean }).handedOver) {
          this.end(operation.from);
          this.live.push(operation.request.id);
          this.requests.set(operation.request.id, { request: operation.request, state: 'granted' });
        }
        break;
      case 'heartbeat':
        for (const id of (result as { lost: string[] }).lost ?? []) this.end(id);
        break;
      case 'kill':
        this.dead.add(operation.replica);
        break;
      case 'revive':
        this.dead.delete(operation.replica);
        break;
      case 'upsertPods':
        for (const pod of operation.pods) {
          const at = this.pods.findIndex((p) => p.name === pod.name);
          if (at >= 0) this.pods[at] = pod;
          else this.pods.push(pod);
        }
        break;
      case 'upsertTenants':
        for (const tenant of operation.tenants) {
          const at = this.tenants.findIndex((t) => t.id === tenant.id);
          if (at >= 0) this.tenants[at] = tenant;
          else this.tenants.push(tenant);
        }
        break;
      default:
    }
    if (this.live.length > 200) {
      this.live = this.live.filter((id) => this.requests.get(id)?.state !== 'ended');
    }
  }

  private end(id: string): void {
    const tracked = this.requests.get(id);
    if (tracked) tracked.state = 'ended';
  }

  private enqueue(replica: string): EnqueueRequest {
    const rng = this.rng;
    // A retry of a live id (a lost reply) must report its state and count nothing again.
    if (this.live.length > 0 && chance(rng, 0.04)) {
      const tracked = this.requests.get(pick(rng, this.live));
      if (tracked) return tracked.request;
    }
    this.serial += 1;
    const request: EnqueueRequest = {
      id: `q${this.serial}`,
      tenant: chance(rng, 0.01) ? 'nobody' : pick(rng, this.tenants).id,
      band: pick(rng, BANDS),
      replica,
    };
    if (chance(rng, 0.5)) request.sloClass = pick(rng, CLASSES);
    if (chance(rng, 0.3)) request.cost = uniformInt(rng, 1, 4);
    if (chance(rng, 0.4)) request.kvBlocks = uniformInt(rng, 0, 6);
    if (chance(rng, 0.3)) request.deadlineMs = uniformInt(rng, 0, 3_000);
    if (chance(rng, 0.3)) request.ttlMs = uniformInt(rng, 1, 3_000);
    if (chance(rng, 0.3)) request.podHint = chance(rng, 0.9) ? pick(rng, this.pods).name : 'gone';
    if (chance(rng, 0.4)) request.tokens = uniformInt(rng, 0, 8);
    if (chance(rng, 0.5)) request.budgetTokens = uniformInt(rng, 0, 60);
    sized(rng, request);
    if (chance(rng, 0.6)) {
      // A few conversations, each a chain of blocks: requests share prefixes of them.
      const conversation = pick(rng, ['a', 'b', 'c', 'd']);
      const blocks = uniformInt(rng, 1, 5);
      request.prefix = Array.from({ length: blocks }, (_, i) => `${conversation}${i}`);
    }
    if (chance(rng, 0.35)) request.adapter = pick(rng, ADAPTERS);
    return request;
  }

  /**
   * Slot recycling: a granted request's slot to a new one of the same replica, tenant, band
   * and KV blocks most of the time (a band below 0 raised to 0, so that one is refused), and
   * sometimes one that differs in one of them.
   */
  private handover(): Operation {
    const rng = this.rng;
    const from = this.target('granted');
    const tracked = this.requests.get(from)?.request;
    const same = <T>(value: T | undefined, other: () => T): T =>
      value !== undefined && chance(rng, 0.85) ? value : other();
    this.serial += 1;
    const request: EnqueueRequest = {
      id: `q${this.serial}`,
      tenant: same(tracked?.tenant, () => pick(rng, this.tenants).id),
      band: Math.max(
        0,
        same(tracked?.band, () => pick(rng, BANDS)),
      ),
      replica: same(tracked?.replica, () => pick(rng, this.replicas)),
      kvBlocks: same(tracked?.kvBlocks ?? 0, () => uniformInt(rng, 0, 6)),
    };
    if (chance(rng, 0.5)) request.sloClass = pick(rng, CLASSES);
    if (chance(rng, 0.3)) request.cost = uniformInt(rng, 1, 4);
    if (chance(rng, 0.5)) request.budgetTokens = uniformInt(rng, 0, 60);
    sized(rng, request);
    const options: ReleaseOptions = { outcome: pick(rng, OUTCOMES) };
    if (chance(rng, 0.5))
      options.usage = { inputTokens: uniformInt(rng, 0, 50), outputTokens: uniformInt(rng, 0, 50) };
    return { op: 'handover', from, options, request };
  }

  private release(): ReleaseOptions {
    const rng = this.rng;
    const options: ReleaseOptions = { outcome: pick(rng, OUTCOMES) };
    if (chance(rng, 0.5))
      options.usage = { inputTokens: uniformInt(rng, 0, 50), outputTokens: uniformInt(rng, 0, 50) };
    if (chance(rng, 0.4)) options.actualTokens = uniformInt(rng, 0, 10);
    // What the pod had of the prompt: up to the 5 blocks of a conversation (prefix routing).
    if (chance(rng, 0.5)) options.prefixCachedBlocks = uniformInt(rng, 0, 5);
    return options;
  }

  /** A live id in the given state most of the time; sometimes any id (maybe ended). */
  private target(state: 'granted' | 'queued' | 'any'): string {
    const rng = this.rng;
    if (this.live.length === 0) return 'q0';
    for (let tries = 0; tries < 8; tries += 1) {
      const id = pick(rng, this.live);
      const tracked = this.requests.get(id);
      if (state === 'any' || tracked?.state === state) return id;
    }
    return pick(rng, this.live);
  }

  /** The replica's live ids, some dropped, sometimes one it does not own. */
  private heldBy(replica: string): string[] {
    const rng = this.rng;
    const ids = this.live.filter((id) => {
      const tracked = this.requests.get(id);
      return tracked?.request.replica === replica && tracked.state !== 'ended' && chance(rng, 0.8);
    });
    if (this.live.length > 0 && chance(rng, 0.2)) ids.push(pick(rng, this.live));
    return ids.slice(0, 20);
  }

  /**
   * A new or changed tenant. A tenant that keeps a bucket is never updated: upsertTenants-2.lua
   * refills an existing bucket at Redis TIME (it has no config key, so no test clock).
   */
  private tenantChange(): TenantConfig[] {
    const rng = this.rng;
    if (this.tenants.length < 7 && chance(rng, 0.15)) {
      return [randomTenant(rng, `t${this.tenants.length}`)];
    }
    const candidates = this.tenants.filter((t) => !t.tokenBucket);
    if (candidates.length === 0 || chance(rng, 0.3)) {
      const withBucket = this.tenants.filter((t) => t.tokenBucket);
      const tenant = withBucket.length > 0 ? pick(rng, withBucket) : pick(rng, this.tenants);
      return [{ ...tenant, tokenBucket: null }];
    }
    return [randomTenant(rng, pick(rng, candidates).id)];
  }

  /** Some of the pods, sometimes with one not configured: what a leader's report names. */
  private somePods(): string[] {
    return [...this.pods.map((p) => p.name), 'unknown'].filter(() => chance(this.rng, 0.7));
  }

  /** A scrape of some pods (sometimes one not configured); some say what their cache holds. */
  private podLoads(): PodLoadReport[] {
    const rng = this.rng;
    return this.somePods().map((pod) => ({
      pod,
      waiting: uniformInt(rng, 0, 6),
      running: uniformInt(rng, 0, 6),
      kvUtilization: pick(rng, [0, 0.25, 0.9, 1.2]),
      ...(chance(rng, 0.6) ? { prefixCapacity: uniformInt(rng, 1, 6) } : {}),
    }));
  }

  /** The leader's view of some pods' adapters (sometimes a pod not configured). */
  private podAdapters(): PodAdapterReport[] {
    const rng = this.rng;
    return this.somePods().map((pod) => ({
      pod,
      adapters: ADAPTERS.filter(() => chance(rng, 0.3)),
      ...(chance(rng, 0.7) ? { slots: uniformInt(rng, 0, 3) } : {}),
    }));
  }

  private podChange(): PodConfig[] {
    const rng = this.rng;
    if (this.pods.length < 4 && chance(rng, 0.2)) {
      return [randomPod(rng, `p${this.pods.length}`)];
    }
    return [randomPod(rng, pick(rng, this.pods).name)];
  }
}

/** A request's size for fairness in tokens: its prompt and its max_tokens, often. */
function sized(rng: Rng, request: EnqueueRequest): void {
  if (chance(rng, 0.7)) request.inputTokens = uniformInt(rng, 0, 300);
  if (chance(rng, 0.7)) request.maxTokens = uniformInt(rng, 0, 80);
}

function randomTenant(rng: Rng, id: string): TenantConfig {
  const limit = (p: number, min: number, max: number) =>
    chance(rng, p) ? uniformInt(rng, min, max) : null;
  return {
    id,
    weight: uniformInt(rng, 1, 4),
    queueMax: limit(0.4, 0, 8),
    maxConcurrent: limit(0.4, 0, 5),
    maxKvBlocks: limit(0.3, 0, 10),
    tokenBucket: chance(rng, 0.3)
      ? { capacity: uniformInt(rng, 1, 20), refillPerSecond: uniformInt(rng, 0, 50) }
      : null,
    limits: chance(rng, 0.4)
      ? {
          tokensPerDay: limit(0.6, 20, 400),
          tokensPerMonth: limit(0.4, 50, 800),
          requestsPerMinute: limit(0.6, 1, 30),
        }
      : null,
  };
}

function randomPod(rng: Rng, name: string): PodConfig {
  return { name, cap: uniformInt(rng, 0, 6), healthy: chance(rng, 0.9) };
}

function randomSettings(rng: Rng): SchedulerSettingsInput {
  const ceiling = () => pick(rng, [0, 0.5, 1, 1.5]);
  // Fairness in tokens goes with drr and a per-band order only (configure refuses the rest).
  const tokens = chance(rng, 0.4);
  return {
    fairness: tokens ? 'drr' : pick(rng, ['drr', 'round-robin', 'global-strict'] as const),
    dispatchOrder: tokens
      ? pick(rng, ['priority', 'slo-deadline'] as const)
      : pick(rng, ['priority', 'priority', 'fifo', 'slo-deadline'] as const),
    fairnessUnit: tokens ? 'tokens' : 'requests',
    tokenWeights: { input: uniformInt(rng, 1, 3), output: uniformInt(rng, 1, 4) },
    quantum: uniformInt(rng, 1, 3),
    bandCapacity: uniformInt(rng, 1, 30),
    maxQueueDepth: uniformInt(rng, 2, 60),
    queueTtlMs: uniformInt(rng, 50, 2_000),
    leaseTtlMs: uniformInt(rng, 100, 3_000),
    maxGrantsPerPass: chance(rng, 0.5) ? uniformInt(rng, 1, 4) : 64,
    janitorBatch: chance(rng, 0.5) ? uniformInt(rng, 1, 5) : 100,
    initialBudget: uniformInt(rng, 0, 10),
    admission: {
      policy: pick(rng, ['always-admit', 'always-admit', 'tier-shed', 'gaie-legacy'] as const),
      tierShedThreshold: uniformInt(rng, 0, 10),
      tierShedMinPriority: uniformInt(rng, -1, 1),
    },
    gating: {
      enabled: chance(rng, 0.3),
      defaultCeiling: ceiling(),
      bandCeilings: chance(rng, 0.5) ? { '-1': ceiling(), '1': ceiling() } : {},
    },
    queueShedding: chance(rng, 0.5),
    inflightEviction: chance(rng, 0.5),
    prefix: {
      enabled: chance(rng, 0.7),
      weight: pick(rng, [0, 0.5, 1, 3]),
      pressureWeight: pick(rng, [0, 0.25, 1]),
      // Small bounds rotate the generations often.
      entriesPerPod: pick(rng, [0, 0, 2, 3, 8, 65_536]),
      ttlMs: 3_600_000,
    },
    lora: { enabled: chance(rng, 0.8), load: chance(rng, 0.5) },
  };
}

/**
 * Runs one operation on one engine and returns its comparable result (errors as their code).
 * `advance` and liveness changes have no engine call here: the runner moves the clocks.
 */
export async function apply(
  scheduler: Scheduler,
  operation: Operation,
  fence: Fence,
): Promise<unknown> {
  try {
    switch (operation.op) {
      case 'enqueue':
        return await scheduler.enqueue(operation.request);
      case 'poll':
        return await scheduler.poll(operation.replica);
      case 'release':
        return await scheduler.release(operation.id, operation.options);
      case 'cancel':
        return await scheduler.cancel(operation.id);
      case 'handover':
        return await scheduler.handover(operation.from, operation.options, operation.request);
      case 'heartbeat':
        return await scheduler.heartbeat(operation.replica, operation.ids);
      case 'reclaim':
        return await scheduler.reclaim();
      case 'configure':
        return await scheduler.configure(operation.settings);
      case 'upsertTenants':
        return await scheduler.upsertTenants(operation.tenants);
      case 'upsertPods':
        return await scheduler.upsertPods(operation.pods);
      case 'reportPodLoad':
        return await scheduler.reportPodLoad(fence, operation.loads);
      case 'reportPodAdapters':
        return await scheduler.reportPodAdapters(operation.reports, operation.keepClaimsMs);
      case 'dropPodAdapter':
        return await scheduler.dropPodAdapter(operation.pod, operation.adapter);
      case 'setBudget':
        return await scheduler.setControl(fence, { budget: operation.budget });
      case 'snapshot':
        return normalizeSnapshot(await scheduler.snapshot());
      default:
        return null;
    }
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    return { error: code ?? String(error) };
  }
}

/** A snapshot with its unordered lists sorted, so two engines' snapshots compare equal. */
export function normalizeSnapshot(snapshot: Awaited<ReturnType<Scheduler['snapshot']>>): unknown {
  const byKey =
    <T>(key: (item: T) => string) =>
    (a: T, b: T) =>
      key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0;
  return {
    ...snapshot,
    tenants: [...snapshot.tenants].sort(byKey((t) => t.tenant)),
    pods: [...snapshot.pods].sort(byKey((p) => p.name)),
    replicas: [...snapshot.replicas].sort(byKey((r) => r.replica)),
    counters: [...snapshot.counters].sort(byKey((c) => `${c.tenant}\u0000${c.sloClass}`)),
    saturation: Math.round(snapshot.saturation * 1e9) / 1e9,
  };
}
