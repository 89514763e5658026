import {
  admitUnderLimits,
  assertInteger,
  assertValidName,
  type BucketState,
  countUnderLimits,
  currentBucket,
  EMPTY_COUNTERS,
  estimatedCost,
  hasLimits,
  type LimitsStanding,
  type PodName,
  poolSaturation,
  queueScore,
  type ReplicaId,
  type RequestId,
  refill,
  undoAdmission,
  wholeTokens,
} from '@fairgate/core';
import { rejectionOf, ScriptCode, schedulerError } from '../codes.js';
import type {
  ConfigureOptions,
  ControlWrite,
  EndResult,
  EnqueueRequest,
  EnqueueResult,
  Fence,
  HandoverResult,
  HeartbeatResult,
  LeadershipResult,
  Notice,
  PodAdapterReport,
  PodLoadReport,
  ReclaimReport,
  ReleaseOptions,
  Scheduler,
  SchedulerSnapshot,
  UsageBucket,
  UsageCount,
} from '../contract.js';
import { compareBytes, countersFromFields } from '../counters.js';
import { limitOf, rejected, standingAt, withLimits } from '../limits.js';
import { parseNotice } from '../notices.js';
import {
  normalizeEnqueue,
  normalizeHandover,
  normalizePodAdapters,
  normalizePodLoads,
  normalizeRelease,
  normalizeUsage,
  usageCounts,
  usageHours,
} from '../requests.js';
import {
  type PodConfig,
  type PodHealth,
  resolvePod,
  resolveSettings,
  resolveTenant,
  type SchedulerSettings,
  type SchedulerSettingsInput,
  type TenantConfig,
} from '../settings.js';
import { Gate, LocalEngine, type LocalRequest } from './engine.js';
import { LatencyWindow } from './latency-window.js';
import { LeaderLease } from './leader-lease.js';

export interface LocalSchedulerOptions {
  /** Clock in epoch milliseconds (default Date.now); the Redis twin uses Redis TIME. */
  now?: () => number;
  /** How long TTFT histogram seconds are kept (default 5 minutes). */
  latencyRetentionMs?: number;
}

const MAX_NOTICES_PER_POLL = 1_000;

/**
 * The scheduler in one process: the embedded single-replica default (and later the degraded
 * mode when Redis is unreachable). Same contract and same decisions as RedisScheduler; all
 * replicas ids given to one instance share its state.
 */
export class LocalScheduler implements Scheduler {
  private readonly engine = new LocalEngine();
  private readonly clock: () => number;
  private readonly latency: LatencyWindow;
  /** Mirrors lua/meterUsage-1.lua: hour -> {field -> count, expiry (store ms)}. */
  private readonly usage = new Map<number, { fields: Map<string, number>; expiresAtMs: number }>();
  /** Flush ids applied in the last hour (store ms they are forgotten at). */
  private readonly usageFlushes = new Map<string, number>();
  private readonly lease = new LeaderLease();
  private readonly waiters = new Map<string, Set<() => void>>();
  private readonly leaderData = new Map<string, string>();

  constructor(options: LocalSchedulerOptions = {}) {
    this.clock = options.now ?? Date.now;
    this.latency = new LatencyWindow(options.latencyRetentionMs ?? 300_000);
    this.engine.onNotice = (replica) => {
      for (const wake of this.waiters.get(replica) ?? []) wake();
    };
  }

  /** Live request records (a leak check for tests: 0 once every request has ended). */
  get liveRequestCount(): number {
    return this.engine.requests.size;
  }

  async configure(
    input: SchedulerSettingsInput = {},
    options: ConfigureOptions = {},
  ): Promise<SchedulerSettings> {
    const settings = resolveSettings(input);
    if (options.mode !== 'seed' || !this.engine.settings) {
      const previousUnit = this.engine.settings?.fairnessUnit ?? 'requests';
      if (settings.fairnessUnit !== previousUnit) this.engine.moveFairnessUnit(settings);
      this.engine.settings = settings;
      this.engine.budget ??= settings.initialBudget;
    }
    await this.reclaim(); // the pass after a write (Scheduler.configure)
    return this.engine.settings;
  }

  /**
   * Mirrors lua/upsertTenants-2.lua: an updated bucket is refilled at its old rate up to now
   * and clamped to the new capacity; removing a bucket drops its level (re-added: full).
   */
  async upsertTenants(tenants: readonly TenantConfig[]): Promise<void> {
    const resolved = tenants.map(resolveTenant);
    const now = this.clock();
    for (const tenant of resolved) {
      const existing = this.engine.tenants.get(tenant.id);
      const gauges = existing ?? { inflight: 0, kvBlocks: 0, waiting: 0 };
      let bucket: BucketState | null = null;
      if (tenant.tokenBucket && existing?.tokenBucket && existing.bucket) {
        const current = refill(existing.bucket, existing.tokenBucket, now);
        bucket = {
          levelMilli: Math.min(current.levelMilli, tenant.tokenBucket.capacity * 1_000),
          updatedAtMs: current.updatedAtMs,
        };
      }
      this.engine.tenants.set(tenant.id, {
        weight: tenant.weight,
        queueMax: tenant.queueMax,
        maxConcurrent: tenant.maxConcurrent,
        maxKvBlocks: tenant.maxKvBlocks,
        tokenBucket: tenant.tokenBucket,
        bucket,
        limits: tenant.limits,
        limitCounters: existing?.limitCounters ?? EMPTY_COUNTERS,
        outMean: existing?.outMean ?? null,
        inflight: gauges.inflight,
        kvBlocks: gauges.kvBlocks,
        waiting: gauges.waiting,
      });
    }
  }

  async upsertPods(pods: readonly PodConfig[]): Promise<void> {
    for (const pod of pods.map(resolvePod)) {
      const existing = this.engine.pods.get(pod.name);
      this.engine.pods.set(pod.name, {
        ...pod,
        leaving: existing?.leaving ?? false,
        inflight: existing?.inflight ?? 0,
        load: existing?.load ?? null,
        prefixCapacity: existing?.prefixCapacity ?? null,
        loraSlots: existing?.loraSlots ?? null,
      });
    }
  }

  /** Mirrors lua/syncPods-7.lua. */
  async syncPods(fence: Fence, pods: readonly PodConfig[]): Promise<boolean> {
    const listed = pods.map(resolvePod);
    if (!this.lease.holds(fence, this.clock())) return false;
    const e = this.engine;
    for (const pod of listed) {
      const existing = e.discovered.has(pod.name) ? e.pods.get(pod.name) : undefined;
      e.discovered.add(pod.name);
      e.pods.set(pod.name, {
        name: pod.name,
        cap: pod.cap,
        healthy: existing && !existing.leaving ? existing.healthy : pod.healthy,
        leaving: false,
        inflight: existing?.inflight ?? 0,
        load: existing?.load ?? null,
        prefixCapacity: existing?.prefixCapacity ?? null,
        loraSlots: existing?.loraSlots ?? null,
      });
    }
    const names = new Set(listed.map((pod) => pod.name));
    for (const name of [...e.discovered]) {
      if (names.has(name)) continue;
      const pod = e.pods.get(name);
      if (pod && !pod.leaving) {
        pod.leaving = true;
        pod.healthy = false;
        e.prefixIndex.forget(name);
        e.adapters.delete(name);
      }
      if (!pod || pod.inflight <= 0) {
        e.pods.delete(name);
        e.discovered.delete(name);
      }
    }
    return true;
  }

  /** Mirrors lua/setPodHealth-1.lua. */
  async setPodHealth(pods: readonly PodHealth[]): Promise<void> {
    for (const pod of pods) assertValidName('pod', pod.name);
    for (const { name, healthy } of pods) {
      const pod = this.engine.pods.get(name);
      if (pod && !pod.leaving) pod.healthy = healthy;
    }
  }

  async forgetPrefixes(pods: readonly PodName[]): Promise<void> {
    for (const pod of pods) assertValidName('pod', pod);
    for (const pod of pods) this.engine.prefixIndex.forget(pod);
  }

  /** Mirrors lua/setPodAdapters-1.lua ('report'). */
  async reportPodAdapters(
    reports: readonly PodAdapterReport[],
    keepClaimsMs: number,
  ): Promise<void> {
    const checked = normalizePodAdapters(reports, keepClaimsMs);
    const e = this.engine;
    if (checked.length === 0) return;
    const claimedSince = this.clock() - keepClaimsMs;
    for (const report of checked) {
      const pod = e.pods.get(report.pod);
      if (!pod) continue;
      if (report.slots !== undefined) pod.loraSlots = report.slots;
      const held = e.podAdapters(report.pod, true);
      const listed = new Set(report.adapters);
      for (const [adapter, since] of held) {
        if (!listed.has(adapter) && (since === 0 || since <= claimedSince)) held.delete(adapter);
      }
      for (const adapter of report.adapters) {
        const since = held.get(adapter);
        if (since !== 0 && (since === undefined || since <= claimedSince)) held.set(adapter, 0);
      }
      if (held.size === 0) e.adapters.delete(report.pod);
    }
  }

  /** Mirrors lua/setPodAdapters-1.lua ('drop'). */
  async dropPodAdapter(pod: PodName, adapter: string): Promise<void> {
    assertValidName('pod', pod);
    assertValidName('adapter', adapter);
    const held = this.engine.adapters.get(pod);
    held?.delete(adapter);
    if (held?.size === 0) this.engine.adapters.delete(pod);
  }

  /** Mirrors lua/enqueue-1.lua. */
  async enqueue(request: EnqueueRequest): Promise<EnqueueResult> {
    const r = normalizeEnqueue(request);
    const e = this.engine;
    const now = this.clock();
    const settings = this.settingsOr(`enqueue ${r.id} (tenant ${r.tenant})`);
    e.touchReplica(r.replica, now, settings);

    const existing = e.requests.get(r.id);
    if (existing?.state === 'granted')
      return { status: 'granted', pod: existing.pod, retried: true };
    if (existing?.state === 'queued') return { status: 'queued', retried: true };

    const tenant = e.tenants.get(r.tenant);
    if (!tenant)
      throw schedulerError(ScriptCode.UnknownTenant, `enqueue ${r.id} (tenant ${r.tenant})`);
    // A limited tenant's standing, carried by every answer (appendStanding in limits.lua):
    // the decision's once it counts, else worked out where a refusal needs it.
    const limited = hasLimits(tenant.limits);
    let standing: LimitsStanding | undefined;
    // Offered is not counted: it is admitted + rejected (countersFromFields).
    const reject = (code: ScriptCode, retryAfterMs?: number): EnqueueResult => {
      e.countRejection(r.tenant, r.sloClass, code);
      standing ??= limited ? standingAt(tenant.limits, tenant.limitCounters, now)! : undefined;
      return rejected(rejectionOf(code)!, retryAfterMs, limitOf(code), standing);
    };
    const pods = e.podsByName();
    if (!pods.some((pod) => pod.healthy)) return reject(ScriptCode.NoHealthyPod);
    const policyCode = e.admissionCode(settings, r.band, pods, now);
    if (policyCode !== undefined) return reject(policyCode);
    if (tenant.maxConcurrent === 0) return reject(ScriptCode.QuotaConcurrencyNeverFits);
    if (tenant.maxKvBlocks !== null && r.kvBlocks > tenant.maxKvBlocks) {
      return reject(ScriptCode.QuotaKvBlocksNeverFits);
    }
    const decision = limited
      ? admitUnderLimits(tenant.limits, tenant.limitCounters, r.budgetTokens, now)
      : undefined;
    if (decision && !decision.ok) {
      return reject(
        decision.reason === 'budget_exhausted'
          ? ScriptCode.BudgetExhausted
          : ScriptCode.RequestRateLimited,
        decision.retryAfterMs,
      );
    }
    const refused = e.takeTokens(tenant, r.tokens, now);
    if (refused) return reject(refused.code, refused.retryAfterMs);
    if (decision?.ok) {
      tenant.limitCounters = decision.counters;
      standing = decision.standing;
    }
    const tokenUnit = settings.fairnessUnit === 'tokens';
    const cost = tokenUnit
      ? estimatedCost(r.inputTokens, r.maxTokens, tenant.outMean, settings.tokenWeights)
      : r.cost;

    const ttlMs = r.ttlMs ?? settings.queueTtlMs;
    const req: LocalRequest = {
      id: r.id,
      tenant: r.tenant,
      band: r.band,
      owner: r.replica,
      sloClass: r.sloClass,
      cost,
      kvBlocks: r.kvBlocks,
      hint: r.podHint,
      prefix: r.prefix,
      adapter: r.adapter,
      expiresAt: now + ttlMs,
      seq: 0,
      tokens: tenant.tokenBucket ? r.tokens : 0,
      lim: decision?.ok ? decision.charge : null,
      w: null,
      px: null,
      state: 'queued',
      pod: '',
    };

    if (
      e.waiting === 0 &&
      !e.tenantAtQuota(tenant, r.kvBlocks) &&
      e.inflight < (e.budget ?? 0) &&
      new Gate(settings, pods, now).open(r.band)
    ) {
      const pod = e.choosePod(pods, r.podHint, r.prefix, settings, now, r.adapter);
      if (pod) {
        if (tokenUnit) e.chargeGrant(req, tenant.weight);
        req.state = 'granted';
        req.pod = pod.name;
        e.requests.set(req.id, req);
        e.holdLease(req, pod, now, settings, now + settings.leaseTtlMs);
        e.rememberPrefix(pod, req, now, settings);
        e.countFlow('admitted', r.tenant, r.sloClass);
        return withLimits({ status: 'granted', pod: pod.name, retried: false }, standing);
      }
    }

    e.seq += 1;
    req.seq = e.seq;
    const score = queueScore(settings.dispatchOrder, {
      seq: req.seq,
      nowMs: now,
      deadlineInMs: r.deadlineMs,
      ttlMs,
    });
    e.requests.set(req.id, req);
    e.linkWaiting(req, score);
    e.joinFlow(req.band, req.tenant, settings);

    const grantedPod = e.dispatchPass(now, settings, req.id);
    if (grantedPod !== null) {
      e.countFlow('admitted', r.tenant, r.sloClass);
      return withLimits(
        { status: 'granted', pod: grantedPod, retried: false, contended: true },
        standing,
      );
    }

    const tenantOver = tenant.queueMax !== null && tenant.waiting > tenant.queueMax;
    const bandOver = (e.waitingByBand.get(req.band) ?? 0) > settings.bandCapacity;
    let code: ScriptCode | undefined;
    let victim: LocalRequest | undefined;
    if (tenantOver) {
      code = ScriptCode.TenantQueueFull;
      if (settings.queueShedding && !bandOver) victim = e.shedVictim(req.tenant, req.band);
    } else if (bandOver) {
      code = ScriptCode.BandFull;
    } else if (e.waiting > settings.maxQueueDepth) {
      code = ScriptCode.GlobalQueueFull;
      if (settings.queueShedding) victim = e.shedVictim(null, req.band);
    }
    if (victim) {
      e.shedWaiting(victim, now);
      code = undefined;
    }
    if (code !== undefined) {
      e.unlinkWaiting(req);
      e.requests.delete(req.id);
      if (req.tokens > 0) e.creditTokens(req.tenant, req.tokens, now);
      if (req.lim) {
        tenant.limitCounters = undoAdmission(tenant.limitCounters, req.lim, tenant.limits);
        standing = standingAt(tenant.limits, tenant.limitCounters, now) ?? undefined;
      }
      return reject(code);
    }
    e.countFlow('admitted', r.tenant, r.sloClass);
    return withLimits({ status: 'queued', retried: false }, standing);
  }

  /** Mirrors lua/poll-1.lua. */
  async poll(replica: ReplicaId): Promise<Notice[]> {
    assertValidName('replica', replica);
    const now = this.clock();
    const settings = this.settingsOr(`poll ${replica}`);
    this.engine.touchReplica(replica, now, settings);
    this.engine.runJanitor(now, settings);
    this.engine.dispatchPass(now, settings, null);
    return this.popNotices(replica);
  }

  async waitForNotices(replica: ReplicaId, timeoutMs: number): Promise<Notice[]> {
    assertValidName('replica', replica);
    assertInteger('timeoutMs', timeoutMs, 1);
    if (!this.engine.notices.has(replica)) {
      await new Promise<void>((resolve) => {
        const waiters = this.waiters.get(replica) ?? new Set();
        this.waiters.set(replica, waiters);
        const done = () => {
          clearTimeout(timer);
          waiters.delete(done);
          if (waiters.size === 0) this.waiters.delete(replica);
          resolve();
        };
        const timer = setTimeout(done, timeoutMs);
        waiters.add(done);
      });
    }
    return this.popNotices(replica);
  }

  cancel(id: RequestId): Promise<EndResult> {
    return this.release(id, { outcome: 'cancelled' });
  }

  /** Mirrors lua/release-1.lua. */
  async release(id: RequestId, options: ReleaseOptions): Promise<EndResult> {
    const r = normalizeRelease(id, options);
    const req = this.engine.requests.get(id);
    if (!req) return { was: 'unknown' };
    const now = this.clock();
    const settings = this.settingsOr(`release ${id}`);
    const was = req.state;
    this.engine.endRequest(req, r.outcome, now);
    if (r.actualTokens !== undefined && was === 'granted' && req.tokens > 0) {
      this.engine.creditTokens(req.tenant, req.tokens - r.actualTokens, now);
    }
    if (
      req.lim &&
      was === 'granted' &&
      r.inputTokens !== undefined &&
      r.outputTokens !== undefined
    ) {
      this.engine.settleLimits(req.tenant, req.lim, r.inputTokens + r.outputTokens);
    }
    if (
      req.w !== null &&
      was === 'granted' &&
      r.inputTokens !== undefined &&
      r.outputTokens !== undefined
    ) {
      this.engine.settleService(req, r.inputTokens, r.outputTokens, settings);
    }
    if (r.inputTokens !== undefined) {
      this.engine.countFlow('inputTokens', req.tenant, req.sloClass, r.inputTokens);
    }
    if (r.outputTokens !== undefined) {
      this.engine.countFlow('outputTokens', req.tenant, req.sloClass, r.outputTokens);
    }
    const predicted =
      was === 'granted'
        ? this.engine.correctPrefix(req, r.prefixCachedBlocks, now, settings)
        : null;
    this.engine.dispatchPass(now, settings, null);
    return predicted === null ? { was } : { was, predictedBlocks: predicted };
  }

  /** Mirrors lua/handover-1.lua. */
  async handover(
    from: RequestId,
    options: ReleaseOptions,
    request: EnqueueRequest,
  ): Promise<HandoverResult> {
    const { release: r, request: next } = normalizeHandover(from, options, request);
    const e = this.engine;
    const settings = this.settingsOr(`handover ${from} -> ${next.id}`);
    const now = this.clock();
    const old = e.requests.get(from);
    if (
      old?.state !== 'granted' ||
      old.owner !== next.replica ||
      old.tenant !== next.tenant ||
      old.band !== next.band ||
      old.tokens !== 0 ||
      e.requests.has(next.id)
    ) {
      return { handedOver: false };
    }
    const tenant = e.tenants.get(old.tenant);
    if (!tenant) return { handedOver: false };
    // KV blocks may differ only where no quota counts them (the tenant's gauge follows).
    if (next.kvBlocks !== old.kvBlocks && tenant.maxKvBlocks !== null) return { handedOver: false };
    e.touchReplica(old.owner, now, settings);
    // The finished request ends (endRequest without freeLease: its slot is not freed).
    e.countFlow(r.outcome, old.tenant, old.sloClass);
    if (r.inputTokens !== undefined)
      e.countFlow('inputTokens', old.tenant, old.sloClass, r.inputTokens);
    if (r.outputTokens !== undefined) {
      e.countFlow('outputTokens', old.tenant, old.sloClass, r.outputTokens);
    }
    e.requests.delete(from);
    e.leases.remove(from);
    // The finished request's reservation settles; a limited tenant's next request counts.
    if (old.lim && r.inputTokens !== undefined && r.outputTokens !== undefined) {
      e.settleLimits(old.tenant, old.lim, r.inputTokens + r.outputTokens);
    }
    const counted = hasLimits(tenant.limits)
      ? countUnderLimits(tenant.limits, tenant.limitCounters, next.budgetTokens, now)
      : undefined;
    if (counted) tenant.limitCounters = counted.counters;
    // Fairness in tokens: the finished request settles, the next one is charged.
    let outMean = tenant.outMean;
    if (old.w !== null && r.inputTokens !== undefined && r.outputTokens !== undefined) {
      outMean = e.settleService(old, r.inputTokens, r.outputTokens, settings);
    }
    const granted: LocalRequest = {
      id: next.id,
      tenant: old.tenant,
      band: old.band,
      owner: old.owner,
      sloClass: next.sloClass,
      cost: next.cost,
      kvBlocks: next.kvBlocks,
      hint: '',
      prefix: [],
      adapter: '',
      lim: counted?.charge ?? null,
      w: null,
      px: null,
      expiresAt: now + settings.queueTtlMs,
      seq: 0,
      tokens: 0,
      state: 'granted',
      pod: old.pod,
    };
    if (settings.fairnessUnit === 'tokens') {
      granted.cost = estimatedCost(
        next.inputTokens,
        next.maxTokens,
        outMean,
        settings.tokenWeights,
      );
      e.chargeGrant(granted, tenant.weight);
    }
    e.requests.set(next.id, granted);
    e.leases.add(next.id, now + settings.leaseTtlMs);
    e.countFlow('admitted', old.tenant, next.sloClass);
    tenant.kvBlocks += next.kvBlocks - old.kvBlocks;

    const pods = e.podsByName();
    const pod = e.pods.get(old.pod);
    const contended =
      e.waiting > 0 ||
      e.inflight > (e.budget ?? 0) ||
      (tenant.maxConcurrent !== null && tenant.inflight > tenant.maxConcurrent) ||
      (tenant.maxKvBlocks !== null && tenant.kvBlocks > tenant.maxKvBlocks) ||
      !pod?.healthy ||
      pod.inflight > pod.cap ||
      e.admissionCode(settings, next.band, pods, now) !== undefined ||
      !new Gate(settings, pods, now).open(next.band);
    if (!counted) return { handedOver: true, pod: old.pod, contended };
    return { handedOver: true, pod: old.pod, contended, limits: counted.standing };
  }

  /** Mirrors lua/heartbeat-1.lua. */
  async heartbeat(replica: ReplicaId, ids: readonly RequestId[] = []): Promise<HeartbeatResult> {
    assertValidName('replica', replica);
    for (const id of ids) assertValidName('heartbeat id', id);
    const now = this.clock();
    const settings = this.settingsOr(`heartbeat ${replica}`);
    this.engine.touchReplica(replica, now, settings);
    const lost: string[] = [];
    for (const id of ids) {
      const req = this.engine.requests.get(id);
      if (req?.owner !== replica) lost.push(id);
      else if (req.state === 'granted') this.engine.leases.add(id, now + settings.leaseTtlMs);
    }
    return { lost };
  }

  /** Mirrors lua/reclaim-1.lua. */
  async reclaim(): Promise<ReclaimReport> {
    const now = this.clock();
    const settings = this.settingsOr('reclaim');
    const [expired, evicted, cancelled] = this.engine.runJanitor(now, settings);
    this.engine.dispatchPass(now, settings, null);
    return { expired, evicted, cancelled };
  }

  async snapshot(): Promise<SchedulerSnapshot> {
    const e = this.engine;
    const now = this.clock();
    const waitingByBand: Record<string, number> = {};
    for (const [band, count] of e.waitingByBand)
      if (count !== 0) waitingByBand[String(band)] = count;
    const pods = e.podsByName().map((pod) => ({
      ...pod,
      load: pod.load && { ...pod.load },
      adapters: [...(e.podAdapters(pod.name, false)?.keys() ?? [])].sort(compareBytes),
    }));
    return {
      nowMs: now,
      settings: e.settings && structuredClone(e.settings),
      budget: e.budget ?? 0,
      controllerState: e.controllerState,
      inflight: e.inflight,
      waiting: e.waiting,
      waitingByBand,
      tenants: [...e.tenants]
        .map(([tenant, t]) => ({
          tenant,
          weight: t.weight,
          queueMax: t.queueMax,
          maxConcurrent: t.maxConcurrent,
          maxKvBlocks: t.maxKvBlocks,
          tokenBucket: t.tokenBucket && { ...t.tokenBucket },
          inflight: t.inflight,
          kvBlocks: t.kvBlocks,
          waiting: t.waiting,
          tokens: t.tokenBucket && wholeTokens(currentBucket(t.bucket, t.tokenBucket, now)),
          limits: { ...t.limits },
          standing: standingAt(t.limits, t.limitCounters, now),
          meanOutputTokens: t.outMean === null ? null : t.outMean / 1_000,
          service: e.serviceOf(tenant),
        }))
        .sort((a, b) => compareBytes(a.tenant, b.tenant)),
      pods,
      replicas: e.replicas
        .entriesInOrder()
        .map(({ member, score }) => ({ replica: member, livenessExpiresAtMs: score })),
      leader: this.lease.leaderAt(now),
      epoch: this.lease.epoch,
      counters: countersFromFields(e.stats),
      saturation: poolSaturation(pods, now, e.settings?.saturation),
    };
  }

  async acquireLeadership(
    replica: ReplicaId,
    ttlMs: number,
    epochFloor = 0,
  ): Promise<LeadershipResult> {
    return this.lease.acquire(replica, ttlMs, this.clock(), epochFloor);
  }

  async renewLeadership(fence: Fence, ttlMs: number): Promise<boolean> {
    return this.lease.renew(fence, ttlMs, this.clock());
  }

  async releaseLeadership(fence: Fence): Promise<boolean> {
    return this.lease.release(fence, this.clock());
  }

  async setControl(fence: Fence, write: ControlWrite): Promise<boolean> {
    if (write.budget !== undefined) assertInteger('budget', write.budget, 0);
    if (write.state === '') throw new TypeError('controller state must be a non-empty string');
    if (!this.lease.holds(fence, this.clock())) return false;
    if (write.state !== undefined) this.engine.controllerState = write.state;
    if (write.budget !== undefined) {
      this.engine.budget = write.budget;
      if (this.engine.settings) await this.reclaim(); // the pass after a budget write
    }
    return true;
  }

  async takeInflightPeak(fence: Fence): Promise<number | null> {
    if (!this.lease.holds(fence, this.clock())) return null;
    const e = this.engine;
    const peak = Math.max(e.peakInflight, e.inflight);
    e.peakInflight = e.inflight;
    return peak;
  }

  /** Mirrors lua/reportPodLoad-4.lua. */
  async reportPodLoad(fence: Fence, loads: readonly PodLoadReport[]): Promise<boolean> {
    const checked = normalizePodLoads(loads);
    const now = this.clock();
    if (!this.lease.holds(fence, now)) return false;
    for (const load of checked) {
      const pod = this.engine.pods.get(load.pod);
      if (!pod) continue;
      pod.load = {
        waiting: load.waiting,
        running: load.running,
        kvUtilization: load.kvUtilization,
        scrapedAtMs: now,
      };
      if (load.prefixCapacity !== undefined) pod.prefixCapacity = load.prefixCapacity;
    }
    return true;
  }

  async setLeaderData(fence: Fence, field: string, value: string): Promise<boolean> {
    assertValidName('leader data field', field);
    if (typeof value !== 'string') throw new TypeError('leader data value must be a string');
    if (!this.lease.holds(fence, this.clock())) return false;
    this.leaderData.set(field, value);
    return true;
  }

  async getLeaderData(field: string): Promise<string | null> {
    assertValidName('leader data field', field);
    return this.leaderData.get(field) ?? null;
  }

  async flushLatency(counts: ReadonlyMap<number, number>): Promise<void> {
    this.latency.flush(counts, this.clock());
  }

  async readLatencyWindow(seconds: number): Promise<Map<number, number>> {
    return this.latency.read(seconds, this.clock());
  }

  /** Mirrors lua/meterUsage-1.lua. */
  async meterUsage(
    counts: readonly UsageCount[],
    retentionS: number,
    flushId: string,
  ): Promise<void> {
    const fields = normalizeUsage(counts, retentionS, flushId);
    if (fields.length === 0) return;
    const now = this.clock();
    for (const [id, until] of this.usageFlushes) if (until <= now) this.usageFlushes.delete(id);
    if (this.usageFlushes.has(flushId)) return;
    this.usageFlushes.set(flushId, now + 3_600_000);
    const hour = Math.floor(this.clock() / 3_600_000) * 3_600;
    const bucket = this.usage.get(hour) ?? { fields: new Map<string, number>(), expiresAtMs: 0 };
    for (const [field, value] of fields)
      bucket.fields.set(field, (bucket.fields.get(field) ?? 0) + value);
    bucket.expiresAtMs = (hour + 3_600 + retentionS) * 1_000;
    this.usage.set(hour, bucket);
  }

  async readUsage(fromHour: number, toHour: number): Promise<UsageBucket[]> {
    const now = this.clock();
    for (const [hour, bucket] of this.usage) if (bucket.expiresAtMs <= now) this.usage.delete(hour);
    return usageHours(fromHour, toHour).flatMap((hour) =>
      usageCounts(hour, this.usage.get(hour)?.fields ?? []),
    );
  }

  async close(): Promise<void> {
    for (const waiters of this.waiters.values()) for (const wake of waiters) wake();
  }

  private settingsOr(context: string): SchedulerSettings {
    if (!this.engine.settings) throw schedulerError(ScriptCode.NotConfigured, context);
    return this.engine.settings;
  }

  private popNotices(replica: string): Notice[] {
    const list = this.engine.notices.get(replica);
    if (!list) return [];
    const taken = list.splice(0, MAX_NOTICES_PER_POLL);
    if (list.length === 0) this.engine.notices.delete(replica);
    return taken.map(parseNotice);
  }
}
