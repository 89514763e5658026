import {
  type BucketConfig,
  type BucketState,
  compareOrderKeys,
  decideAdmission,
  FlowRing,
  type FlowState,
  fullBucket,
  isSheddablePriority,
  type LimitCharge,
  type LimitCounters,
  maxPodLoad,
  newestScrapeMs,
  nextMeanOutput,
  podPressure,
  poolSaturation,
  prefixScore,
  type ScrapedLoad,
  ServiceCounters,
  SortedSet,
  settleCharge,
  type TenantLimits,
  take,
  trueUp,
  virtualCost,
  weightedTokens,
} from '@fairgate/core';
import { ScriptCode } from '../codes.js';
import type { ServiceCounterSnapshot } from '../contract.js';
import { compareBytes, counterField, rejectionField } from '../counters.js';
import type { SchedulerSettings } from '../settings.js';
import { PrefixIndex } from './prefix-index.js';

/**
 * The in-process engine state and the operations the Lua includes perform, one method per
 * Lua function and in the same order of effects (lua/includes/*.lua name the counterpart),
 * so LocalScheduler dispatches, expires and reclaims exactly as RedisScheduler does.
 */
export interface LocalRequest {
  id: string;
  tenant: string;
  band: number;
  owner: string;
  sloClass: string;
  cost: number;
  kvBlocks: number;
  hint: string;
  expiresAt: number;
  seq: number;
  /** Tokens charged to the tenant's bucket (0 = not charged). */
  tokens: number;
  /** Prompt block hashes (EnqueueRequest.prefix; empty = none). */
  prefix: readonly string[];
  /** The LoRA adapter it asks for ('' = none). */
  adapter: string;
  /** What it reserved against its tenant's budgets (null = nothing). */
  lim: LimitCharge | null;
  /** Charged in tokens: its tenant's weight at the charge (null = not charged in tokens). */
  w: number | null;
  /** Prefix routing: the index's prediction at its grant (null = none made). */
  px: number | null;
  state: 'queued' | 'granted';
  pod: string;
}

/** A queue head the pass may dispatch, with its owner's liveness expiry (caps the lease). */
interface ReadyHead {
  req: LocalRequest;
  ownerLiveness: number;
}

/** A band's earliest ready head and its queue score (selectEarliest). */
interface EarliestHead {
  head: ReadyHead;
  score: number;
}

/** One dispatch pass's working state (the `pass` table of lua/includes/dispatch.lua). */
interface Pass {
  now: number;
  settings: SchedulerSettings;
  pods: LocalPod[];
  gate: Gate;
  selfId: string | null;
  selfPod: string | null;
  inflight: number;
  budget: number;
  grants: number;
  evictions: number;
  gateTried: boolean;
}

/**
 * Saturation gating (newGate / gateOpen in lua/includes/saturation.lua): saturation is
 * computed on every question, so each grant of a pass (a pod's in-flight count + 1) is seen
 * by the next; and only when gating is enabled.
 */
export class Gate {
  constructor(
    private readonly settings: SchedulerSettings,
    private readonly pods: readonly LocalPod[],
    private readonly now: number,
  ) {}

  open(band: number): boolean {
    const gating = this.settings.gating;
    if (!gating.enabled) return true;
    const ceiling = gating.bandCeilings[String(band)] ?? gating.defaultCeiling;
    return poolSaturation(this.pods, this.now, this.settings.saturation) < ceiling;
  }
}

/**
 * Score in the shedding and eviction indexes (sheddableScore in lua/includes/requests.lua):
 * the lowest band first, then the highest sequence (the newest) first. Exact in a double for
 * bands >= -1000 and sequences < 2^43.
 */
const SHEDDABLE_BAND_STRIDE = 2 ** 43;
export function sheddableScore(band: number, seq: number): number {
  return band * SHEDDABLE_BAND_STRIDE - seq;
}

export interface LocalTenant {
  weight: number;
  queueMax: number | null;
  maxConcurrent: number | null;
  maxKvBlocks: number | null;
  tokenBucket: BucketConfig | null;
  /** Bucket level and timestamp; null = full (never used, or the bucket was re-added). */
  bucket: BucketState | null;
  /** Budgets and rates, and the counters of the windows last counted in (limits.lua). */
  limits: TenantLimits;
  limitCounters: LimitCounters;
  /** Mean output per request, thousandths of a token (fairness in tokens; null = none yet). */
  outMean: number | null;
  inflight: number;
  kvBlocks: number;
  waiting: number;
}

export interface LocalPod {
  name: string;
  cap: number;
  healthy: boolean;
  /** Discovery no longer lists it (syncPods): deleted once none of its requests is in flight. */
  leaving: boolean;
  inflight: number;
  load: ScrapedLoad | null;
  /** Prompt blocks its KV cache holds (reportPodLoad), null until a scrape says. */
  prefixCapacity: number | null;
  /** Its LoRA adapter slots (reportPodAdapters), null until a report says. */
  loraSlots: number | null;
}

export class LocalEngine {
  settings: SchedulerSettings | null = null;
  budget: number | undefined;
  controllerState: string | null = null;
  inflight = 0;
  /** Most in flight at once since the leader last took it (ctl.peakInflight). */
  peakInflight = 0;
  waiting = 0;
  seq = 0;
  /** Grants of bands < 0 so far (ctl.grantSeq): orders the eviction index. */
  grantSeq = 0;
  /** The scrape the last gate eviction was for (ctl.gateEvictedScrape). */
  gateEvictedScrape: number | undefined;
  readonly waitingByBand = new Map<number, number>();
  readonly tenants = new Map<string, LocalTenant>();
  readonly pods = new Map<string, LocalPod>();
  /** The pods discovery listed (syncPods), apart from the config's. */
  readonly discovered = new Set<string>();
  /** Each pod's index of the prompt blocks it was granted (prefix routing). */
  readonly prefixIndex = new PrefixIndex();
  /**
   * The LoRA adapters each pod holds (lora:<pod> hashes): adapter -> 0 when the leader's
   * report listed it, or the ms a grant claimed it there (lua/includes/lora.lua).
   */
  readonly adapters = new Map<string, Map<string, number>>();
  /** The pass's pods and settings while a dispatch pass runs (loraBeginPass). */
  #loraPass: { pods: readonly LocalPod[]; settings: SchedulerSettings } | null = null;
  readonly requests = new Map<string, LocalRequest>();
  readonly queues = new Map<string, SortedSet>();
  readonly rings = new Map<number, FlowRing>();
  /** Fairness in tokens: the service counters of every band (lua/includes/service.lua). */
  readonly service = new ServiceCounters();
  readonly queueDeadlines = new SortedSet();
  readonly leases = new SortedSet();
  readonly replicas = new SortedSet();
  readonly waitingByReplica = new Map<string, SortedSet>();
  /** Granted requests of bands < 0 by sheddableScore(band, grantSeq) (evictable). */
  readonly evictable = new SortedSet();
  /** Waiting requests of bands < 0 by sheddableScore(band, seq) (sheddable). */
  readonly sheddable = new SortedSet();
  readonly sheddableByTenant = new Map<string, SortedSet>();
  readonly notices = new Map<string, string[]>();
  readonly stats = new Map<string, number>();
  /** Called after a notice is queued for a replica (wakes waitForNotices). */
  onNotice: (replica: string) => void = () => {};

  // --- stats.lua
  countFlow(counter: string, tenant: string, sloClass: string, amount = 1): void {
    const field = this.#flowField(counter, tenant, sloClass);
    this.stats.set(field, (this.stats.get(field) ?? 0) + amount);
  }

  /**
   * counterField's string, made once per tenant, class and counter: a count (several per
   * request) is then lookups of strings whose hashes are cached, where a fresh concatenation
   * is built and hashed each time. As many entries as `stats` has flow fields.
   */
  readonly #flowFields = new Map<string, Map<string, Map<string, string>>>();

  #flowField(counter: string, tenant: string, sloClass: string): string {
    let byClass = this.#flowFields.get(tenant);
    if (!byClass) {
      byClass = new Map();
      this.#flowFields.set(tenant, byClass);
    }
    let byCounter = byClass.get(sloClass);
    if (!byCounter) {
      byCounter = new Map();
      byClass.set(sloClass, byCounter);
    }
    let field = byCounter.get(counter);
    if (field === undefined) {
      field = counterField(counter, tenant, sloClass);
      byCounter.set(counter, field);
    }
    return field;
  }

  countRejection(tenant: string, sloClass: string, code: ScriptCode): void {
    const field = rejectionField(tenant, sloClass, code);
    this.stats.set(field, (this.stats.get(field) ?? 0) + 1);
  }

  // --- replicas.lua
  touchReplica(replica: string, now: number, settings: SchedulerSettings): void {
    this.replicas.add(replica, now + settings.leaseTtlMs);
  }

  replicaLiveness(replica: string, now: number): number | undefined {
    const expiry = this.replicas.score(replica);
    return expiry !== undefined && expiry > now ? expiry : undefined;
  }

  notifyReplica(replica: string, notice: string): void {
    if (this.replicas.score(replica) === undefined) return;
    const list = this.notices.get(replica) ?? [];
    list.push(notice);
    this.notices.set(replica, list);
    this.onNotice(replica);
  }

  // --- tenants.lua
  tenantAtQuota(tenant: LocalTenant, kvBlocks: number): boolean {
    if (tenant.maxConcurrent !== null && tenant.inflight >= tenant.maxConcurrent) return true;
    return tenant.maxKvBlocks !== null && tenant.kvBlocks + kvBlocks > tenant.maxKvBlocks;
  }

  // --- bucket.lua
  /** takeTokens: undefined when taken or not charged, else the refusal (nothing taken). */
  takeTokens(
    tenant: LocalTenant,
    cost: number,
    now: number,
  ): { code: ScriptCode; retryAfterMs: number | undefined } | undefined {
    const config = tenant.tokenBucket;
    if (!config || cost <= 0) return undefined;
    const result = take(tenant.bucket ?? fullBucket(config, now), config, cost, now);
    if (result.ok) {
      tenant.bucket = result.state;
      return undefined;
    }
    const retryAfterMs = Number.isFinite(result.retryAfterMs) ? result.retryAfterMs : undefined;
    return { code: ScriptCode.RateLimited, retryAfterMs };
  }

  /** creditTokens: a refund or a true-up (negative charges), capped at the capacity. */
  creditTokens(tenantName: string, tokens: number, now: number): void {
    const tenant = this.tenantOf(tenantName);
    const config = tenant.tokenBucket;
    if (!config) return;
    tenant.bucket = trueUp(tenant.bucket ?? fullBucket(config, now), config, tokens, 0, now);
  }

  // --- limits.lua
  /** settleLimits: a reservation trued up to `actual` tokens (0 gives it back). */
  settleLimits(tenantName: string, charge: LimitCharge, actual: number): void {
    const tenant = this.tenantOf(tenantName);
    tenant.limitCounters = settleCharge(tenant.limitCounters, charge, actual);
  }

  // --- pods.lua
  podsByName(): LocalPod[] {
    return [...this.pods.values()].sort((a, b) => compareBytes(a.name, b.name));
  }

  /**
   * The hinted pod when it has room; else, for a request with a prefix while prefix routing
   * is on, the best-scoring pod with room when some pod holds part of the prefix
   * (choosePrefixPod), or the least-loaded pod with ties to the fewest indexed keys when
   * none does; else the least-loaded pod with room (chooseRequestPod in prefix.lua). A
   * request for a LoRA adapter chooses so among the pods adapterPods leaves (lora.lua), and
   * gets none when it waits.
   */
  choosePod(
    pods: readonly LocalPod[],
    hint: string,
    prefix: readonly string[] = [],
    settings?: SchedulerSettings,
    now = 0,
    adapter = '',
  ): LocalPod | undefined {
    const hinted = hint === '' ? undefined : this.pods.get(hint);
    if (hinted && podHasRoom(hinted)) return hinted;
    if (adapter === '' || !settings?.lora.enabled) {
      return this.chooseAmong(pods, prefix, settings, now);
    }
    const candidates = this.adapterPods(pods, adapter, settings);
    if (!candidates) return undefined;
    const pod = this.chooseAmong(candidates, prefix, settings, now);
    // claimAdapter: an adapter no healthy pod holds is claimed on the pod it goes to.
    if (pod && settings.lora.load && this.adapterHolders(pods, adapter).length === 0) {
      this.podAdapters(pod.name, true).set(adapter, now);
    }
    return pod;
  }

  // --- lora.lua
  /** The adapters a pod holds (created when `create`). */
  podAdapters(pod: string, create: true): Map<string, number>;
  podAdapters(pod: string, create: false): Map<string, number> | undefined;
  podAdapters(pod: string, create: boolean): Map<string, number> | undefined {
    let held = this.adapters.get(pod);
    if (!held && create) {
      held = new Map();
      this.adapters.set(pod, held);
    }
    return held;
  }

  /** The healthy pods that hold `adapter`, in name order. */
  private adapterHolders(pods: readonly LocalPod[], adapter: string): LocalPod[] {
    return pods.filter((pod) => pod.healthy && this.adapters.get(pod.name)?.has(adapter));
  }

  private hasAdapterSlot(pod: LocalPod): boolean {
    return pod.loraSlots === null || (this.adapters.get(pod.name)?.size ?? 0) < pod.loraSlots;
  }

  /** The pods a request for `adapter` may go to, or undefined when it waits (adapterPods). */
  private adapterPods(
    pods: readonly LocalPod[],
    adapter: string,
    settings: SchedulerSettings,
  ): readonly LocalPod[] | undefined {
    const holders = this.adapterHolders(pods, adapter);
    if (holders.length > 0) {
      const ready = holders.filter(podHasRoom);
      return ready.length > 0 ? ready : undefined;
    }
    if (!settings.lora.load) return pods;
    const free = pods.filter((pod) => podHasRoom(pod) && this.hasAdapterSlot(pod));
    if (free.length > 0) return free;
    if (pods.some((pod) => pod.healthy && this.hasAdapterSlot(pod))) return undefined;
    return pods;
  }

  /** adapterWaits: inside a pass, whether a waiting request must wait for its adapter. */
  private adapterWaits(req: LocalRequest): boolean {
    const pass = this.#loraPass;
    if (!pass || req.adapter === '' || !pass.settings.lora.enabled) return false;
    const hinted = req.hint === '' ? undefined : this.pods.get(req.hint);
    if (hinted && podHasRoom(hinted)) return false;
    return this.adapterPods(pass.pods, req.adapter, pass.settings) === undefined;
  }

  /** The prefix score's or the least load's choice among `pods` (chooseAmong in prefix.lua). */
  private chooseAmong(
    pods: readonly LocalPod[],
    prefix: readonly string[],
    settings: SchedulerSettings | undefined,
    now: number,
  ): LocalPod | undefined {
    if (prefix.length > 0 && settings?.prefix.enabled) {
      return (
        this.choosePrefixPod(pods, prefix, settings, now) ??
        leastLoaded(pods, (pod) => this.prefixIndex.size(pod.name, now))
      );
    }
    return leastLoaded(pods);
  }

  // --- prefix.lua
  /**
   * The pod with room of the highest prefixScore (the first in name order on a tie), or
   * undefined when no pod with room holds even the first block.
   */
  private choosePrefixPod(
    pods: readonly LocalPod[],
    prefix: readonly string[],
    settings: SchedulerSettings,
    now: number,
  ): LocalPod | undefined {
    let best: LocalPod | undefined;
    let bestScore = 0;
    let anyMatch = false;
    for (const pod of pods) {
      if (!podHasRoom(pod)) continue;
      const matched = this.prefixIndex.matched(pod.name, prefix, now);
      if (matched > 0) anyMatch = true;
      const pressure = podPressure(pod, now, settings.saturation) ?? 0;
      const score = prefixScore(
        settings.prefix,
        matched,
        prefix.length,
        pod.inflight,
        pod.cap,
        pressure,
      );
      if (!best || score > bestScore) {
        best = pod;
        bestScore = score;
      }
    }
    return anyMatch ? best : undefined;
  }

  /**
   * A grant on `pod` (prefix routing on): the request records the index's prediction (the
   * leading run of its prefix the pod holds) and keeps its prefix only with a run of 2 or
   * more, for correctPrefix (as its Lua record); the index learns its prefix.
   */
  rememberPrefix(pod: LocalPod, req: LocalRequest, now: number, settings: SchedulerSettings): void {
    if (settings.prefix.enabled && req.prefix.length > 0) {
      req.px = this.prefixIndex.matched(pod.name, req.prefix, now);
      this.prefixIndex.remember(pod.name, req.prefix, now, settings.prefix, pod.prefixCapacity);
    }
    if (req.px === null || req.px < 2) req.prefix = [];
  }

  /**
   * At the release of a granted request: the pod's cached blocks against the prediction
   * (correctPrefix in prefix.lua). Returns the prediction, null when none was made.
   */
  correctPrefix(
    req: LocalRequest,
    cachedBlocks: number | undefined,
    now: number,
    settings: SchedulerSettings,
  ): number | null {
    const predicted = req.px;
    if (predicted === null) return null;
    if (cachedBlocks === undefined || cachedBlocks + 1 >= predicted || !settings.prefix.enabled) {
      return predicted;
    }
    if (!this.pods.has(req.pod)) return predicted;
    this.prefixIndex.missed(req.pod, req.prefix, now, settings.prefix);
    return predicted;
  }

  // --- requests.lua
  linkWaiting(req: LocalRequest, score: number): void {
    this.queueOf(req.band, req.tenant, true).add(req.id, score);
    this.queueDeadlines.add(req.id, req.expiresAt);
    const byOwner = this.waitingByReplica.get(req.owner) ?? new SortedSet();
    byOwner.add(req.id, req.seq);
    this.waitingByReplica.set(req.owner, byOwner);
    this.waiting += 1;
    this.waitingByBand.set(req.band, (this.waitingByBand.get(req.band) ?? 0) + 1);
    this.tenantOf(req.tenant).waiting += 1;
    if (isSheddablePriority(req.band)) {
      const shedScore = sheddableScore(req.band, req.seq);
      this.sheddable.add(req.id, shedScore);
      const byTenant = this.sheddableByTenant.get(req.tenant) ?? new SortedSet();
      byTenant.add(req.id, shedScore);
      this.sheddableByTenant.set(req.tenant, byTenant);
    }
  }

  unlinkWaiting(req: LocalRequest): void {
    const queue = this.queueOf(req.band, req.tenant, false);
    queue?.remove(req.id);
    if (queue?.size === 0) this.queues.delete(queueName(req.band, req.tenant));
    this.queueDeadlines.remove(req.id);
    const byOwner = this.waitingByReplica.get(req.owner);
    byOwner?.remove(req.id);
    if (byOwner?.size === 0) this.waitingByReplica.delete(req.owner);
    this.waiting -= 1;
    this.waitingByBand.set(req.band, (this.waitingByBand.get(req.band) ?? 0) - 1);
    this.tenantOf(req.tenant).waiting -= 1;
    if (isSheddablePriority(req.band)) {
      this.sheddable.remove(req.id);
      const byTenant = this.sheddableByTenant.get(req.tenant);
      byTenant?.remove(req.id);
      if (byTenant?.size === 0) this.sheddableByTenant.delete(req.tenant);
    }
  }

  holdLease(
    req: LocalRequest,
    pod: LocalPod,
    now: number,
    settings: SchedulerSettings,
    ownerLiveness: number,
  ): void {
    this.leases.add(req.id, Math.min(now + settings.leaseTtlMs, ownerLiveness));
    this.inflight += 1;
    this.peakInflight = Math.max(this.peakInflight, this.inflight);
    const tenant = this.tenantOf(req.tenant);
    tenant.inflight += 1;
    tenant.kvBlocks += req.kvBlocks;
    pod.inflight += 1;
    if (isSheddablePriority(req.band)) {
      this.grantSeq += 1;
      this.evictable.add(req.id, sheddableScore(req.band, this.grantSeq));
    }
  }

  freeLease(req: LocalRequest): void {
    this.leases.remove(req.id);
    this.inflight -= 1;
    const tenant = this.tenantOf(req.tenant);
    tenant.inflight -= 1;
    tenant.kvBlocks -= req.kvBlocks;
    const pod = this.pods.get(req.pod);
    if (pod) pod.inflight -= 1;
    if (isSheddablePriority(req.band)) this.evictable.remove(req.id);
  }

  /**
   * Ends a live request; one that ends while waiting gets its bucket tokens and its budget
   * reservation back.
   */
  endRequest(req: LocalRequest, outcome: string, now: number): void {
    if (req.state === 'granted') {
      this.freeLease(req);
    } else {
      this.unlinkWaiting(req);
      if (req.tokens > 0) this.creditTokens(req.tenant, req.tokens, now);
      if (req.lim) this.settleLimits(req.tenant, req.lim, 0);
    }
    this.countFlow(outcome, req.tenant, req.sloClass);
    this.requests.delete(req.id);
  }

  // --- expiry.lua
  expireWaiting(req: LocalRequest, now: number): void {
    this.endRequest(req, 'expired', now);
    this.notifyReplica(req.owner, `expired|${req.id}`);
  }

  evictGranted(req: LocalRequest, now: number): void {
    this.endRequest(req, 'evicted', now);
    this.notifyReplica(req.owner, `evict|${req.id}`);
  }

  // --- admission.lua
  admissionCode(settings: SchedulerSettings, band: number, pods: readonly LocalPod[], now: number) {
    const decision = decideAdmission(settings.admission, band, {
      maxPodLoad: maxPodLoad(pods, now, settings.saturation.staleMs),
      saturation: poolSaturation(pods, now, settings.saturation),
    });
    if (decision.admit) return undefined;
    return {
      shed_by_tier: ScriptCode.ShedByTier,
      saturated: ScriptCode.Saturated,
      rejected_by_policy: ScriptCode.RejectedByPolicy,
    }[decision.reason];
  }

  // --- shedding.lua
  shedVictim(tenantName: string | null, arrivalBand: number): LocalRequest | undefined {
    const index = tenantName === null ? this.sheddable : this.sheddableByTenant.get(tenantName);
    for (;;) {
      const head = index?.first();
      if (!index || !head) return undefined;
      const victim = this.requests.get(head.member);
      if (victim?.state === 'queued') return victim.band < arrivalBand ? victim : undefined;
      index.remove(head.member); // stale entry (the Lua drops those of older script versions)
    }
  }

  shedWaiting(victim: LocalRequest, now: number): void {
    this.endRequest(victim, 'evicted', now);
    this.countFlow('shed', victim.tenant, victim.sloClass);
    this.notifyReplica(victim.owner, `shed|${victim.id}`);
  }

  // --- service.lua
  /** Adds delta to the tenant's service counter in the band, backlogged or not. */
  addService(band: number, tenant: string, delta: number): void {
    this.service.add(band, tenant, delta);
  }

  /**
   * chargeGrant: a grant made outside a dispatch pass (on an empty pool, or a recycled
   * slot's next request) is charged its estimate; `req.w` keeps the weight for its release.
   */
  chargeGrant(req: LocalRequest, weight: number): void {
    req.w = weight;
    this.addService(req.band, req.tenant, virtualCost(req.cost, weight));
  }

  /**
   * settleService: a request charged in tokens ends with its usage: the counter gets the
   * difference from its estimate, the tenant's mean output the sample. Returns the new mean.
   */
  settleService(
    req: LocalRequest,
    inputTokens: number,
    outputTokens: number,
    settings: SchedulerSettings,
  ): number {
    const weight = req.w as number;
    const actual = weightedTokens(inputTokens, outputTokens, settings.tokenWeights);
    this.addService(
      req.band,
      req.tenant,
      virtualCost(actual, weight) - virtualCost(req.cost, weight),
    );
    const tenant = this.tenantOf(req.tenant);
    tenant.outMean = nextMeanOutput(tenant.outMean, outputTokens);
    return tenant.outMean;
  }

  /** The tenant's service counters, highest band first (TenantSnapshot.service). */
  serviceOf(tenant: string): ServiceCounterSnapshot[] {
    const out: ServiceCounterSnapshot[] = [];
    for (const [field, counter] of this.service.idleEntries()) {
      const sep = field.indexOf(':');
      if (field.slice(sep + 1) !== tenant) continue;
      const band = Number(field.slice(0, sep));
      if (!this.service.isBacklogged(band, tenant)) out.push({ band, counter, backlogged: false });
    }
    for (const band of this.service.bands()) {
      const counter = this.service.isBacklogged(band, tenant)
        ? this.service.counterOf(band, tenant)
        : undefined;
      if (counter !== undefined) out.push({ band, counter, backlogged: true });
    }
    return out.sort((a, b) => b.band - a.band);
  }

  /**
   * configure-1.lua's move between fairness units: the waiting tenants of each band (lowest
   * band first) leave one structure for the other, in the order the old one held them.
   */
  moveFairnessUnit(settings: SchedulerSettings): void {
    if (settings.fairnessUnit === 'tokens') {
      for (const band of [...this.rings.keys()].sort((a, b) => a - b)) {
        for (const tenant of this.rings.get(band)?.tenants() ?? []) this.service.join(band, tenant);
        this.rings.delete(band);
      }
      return;
    }
    for (const band of this.service.bands().sort((a, b) => a - b)) {
      for (const { tenant } of this.service.backlogged(band)) {
        this.service.leave(band, tenant);
        this.joinRing(band, tenant, this.tenantOf(tenant).weight * settings.quantum);
      }
    }
  }

  // --- ring.lua
  /** joinFlow: the tenant's queue in the band got its first request. */
  joinFlow(band: number, tenant: string, settings: SchedulerSettings): void {
    if (settings.fairnessUnit === 'tokens') this.service.join(band, tenant);
    else this.joinRing(band, tenant, this.tenantOf(tenant).weight * settings.quantum);
  }

  joinRing(band: number, tenant: string, turnCredit: number): void {
    let ring = this.rings.get(band);
    if (!ring) {
      ring = new FlowRing();
      this.rings.set(band, ring);
    }
    ring.join(tenant, turnCredit);
  }

  /** probeFlow: drops expired heads and heads of dead owners, then classifies the flow. */
  probeFlow(band: number, tenantName: string, now: number): FlowState & { ready?: ReadyHead } {
    for (;;) {
      const head = this.queueOf(band, tenantName, false)?.first();
      if (!head) return { kind: 'empty' };
      const req = this.requests.get(head.member) as LocalRequest;
      const ownerLiveness = req.expiresAt > now ? this.replicaLiveness(req.owner, now) : undefined;
      if (req.expiresAt <= now) {
        this.expireWaiting(req, now);
      } else if (ownerLiveness === undefined) {
        this.endRequest(req, 'cancelled', now);
      } else {
        if (this.tenantAtQuota(this.tenantOf(tenantName), req.kvBlocks) || this.adapterWaits(req)) {
          return { kind: 'blocked' };
        }
        const ready = { req, ownerLiveness };
        return { kind: 'ready', cost: req.cost, head: { score: head.score, id: req.id }, ready };
      }
    }
  }

  selectFlow(band: number, now: number, settings: SchedulerSettings): ReadyHead | undefined {
    if (settings.fairnessUnit === 'tokens') return this.selectByService(band, now);
    return this.selectIn(band, now, settings.fairness, settings.quantum)?.head;
  }

  /** selectByService: the smallest backlogged counter whose head is ready. */
  private selectByService(band: number, now: number): ReadyHead | undefined {
    let ready: ReadyHead | undefined;
    this.service.select(band, (name) => {
      const state = this.probeFlow(band, name, now);
      ready = state.ready;
      return state.kind;
    });
    return ready;
  }

  /** selectEarliest: the band's earliest head (score, then id) and its score. */
  selectEarliest(band: number, now: number): EarliestHead | undefined {
    return this.selectIn(band, now, 'global-strict', 1);
  }

  private selectIn(
    band: number,
    now: number,
    fairness: SchedulerSettings['fairness'],
    quantum: number,
  ): EarliestHead | undefined {
    const ring = this.rings.get(band);
    if (!ring) return undefined;
    const ready = new Map<string, EarliestHead>();
    const tenant = ring.select(
      fairness,
      (name) => {
        const state = this.probeFlow(band, name, now);
        if (state.ready && state.kind === 'ready') {
          ready.set(name, { head: state.ready, score: state.head.score });
        }
        return state;
      },
      (name) => this.tenantOf(name).weight * quantum,
    );
    if (ring.size === 0) this.rings.delete(band);
    return tenant === undefined ? undefined : ready.get(tenant);
  }

  // --- dispatch.lua
  dispatchPass(now: number, settings: SchedulerSettings, selfId: string | null): string | null {
    if (this.waiting <= 0) return null;
    const budget = this.budget ?? 0;
    if (this.inflight >= budget && !settings.inflightEviction) return null;
    const pods = this.podsByName();
    const pass: Pass = {
      now,
      settings,
      pods,
      gate: new Gate(settings, pods, now),
      selfId,
      selfPod: null,
      inflight: this.inflight,
      budget,
      grants: 0,
      evictions: 0,
      gateTried: false,
    };
    this.#loraPass = { pods, settings };
    try {
      if (settings.dispatchOrder === 'fifo') this.fifoPass(pass);
      else this.priorityPass(pass);
    } finally {
      this.#loraPass = null;
    }
    return pass.selfPod;
  }

  private hasRoom(pass: Pass): boolean {
    return pass.inflight < pass.budget && this.choosePod(pass.pods, '') !== undefined;
  }

  private mayEvict(pass: Pass, band: number): boolean {
    return (
      pass.settings.inflightEviction &&
      !isSheddablePriority(band) &&
      pass.evictions < pass.settings.maxGrantsPerPass
    );
  }

  private evictOne(pass: Pass): boolean {
    let victim: LocalRequest | undefined;
    while (!victim) {
      const head = this.evictable.first();
      if (!head) return false;
      victim = this.requests.get(head.member);
      if (victim?.state !== 'granted') {
        victim = undefined;
        this.evictable.remove(head.member); // stale entry (see lua/includes/dispatch.lua)
      }
    }
    // The pass works on the engine's own pod objects, so freeing the lease frees the pod slot.
    this.evictGranted(victim, pass.now);
    pass.inflight -= 1;
    pass.evictions += 1;
    return true;
  }

  private gateEviction(pass: Pass): void {
    if (pass.gateTried) return;
    pass.gateTried = true;
    const newest = newestScrapeMs(pass.pods);
    if (newest === undefined) return;
    if (newest <= (this.gateEvictedScrape ?? -1)) return;
    if (this.evictOne(pass)) this.gateEvictedScrape = newest;
  }

  private grantWaiting(pass: Pass, ready: ReadyHead, band: number, fifo: boolean): void {
    const { req, ownerLiveness } = ready;
    const pod = this.choosePod(
      pass.pods,
      req.hint,
      req.prefix,
      pass.settings,
      pass.now,
      req.adapter,
    ) as LocalPod;
    this.unlinkWaiting(req);
    req.state = 'granted';
    req.pod = pod.name;
    this.holdLease(req, pod, pass.now, pass.settings, ownerLiveness);
    this.rememberPrefix(pod, req, pass.now, pass.settings);
    const queueEmptyNow = !this.queues.has(queueName(band, req.tenant));
    const ring = this.rings.get(band);
    if (fifo) {
      // Fairness is not used in fifo: no deficits, only ring membership.
      ring?.charge(req.tenant, req.cost, 'global-strict', queueEmptyNow);
    } else if (pass.settings.fairnessUnit === 'tokens') {
      req.w = this.tenantOf(req.tenant).weight;
      this.service.charge(band, req.tenant, virtualCost(req.cost, req.w), queueEmptyNow);
    } else {
      ring?.charge(req.tenant, req.cost, pass.settings.fairness, queueEmptyNow);
    }
    if (ring?.size === 0) this.rings.delete(band);
    pass.grants += 1;
    pass.inflight += 1;
    if (req.id === pass.selfId) pass.selfPod = pod.name;
    else this.notifyReplica(req.owner, `grant|${req.id}|${pod.name}`);
  }

  private bandsHighestFirst(): number[] {
    return [...this.rings]
      .filter(([, ring]) => ring.size > 0)
      .map(([band]) => band)
      .concat(this.service.bands())
      .sort((a, b) => b - a);
  }

  private priorityPass(pass: Pass): void {
    const { settings } = pass;
    for (const band of this.bandsHighestFirst()) {
      let stop = false;
      if (!pass.gate.open(band)) {
        if (
          this.mayEvict(pass, band) &&
          !pass.gateTried &&
          this.selectFlow(band, pass.now, settings)
        ) {
          this.gateEviction(pass);
        }
      } else {
        while (pass.grants < settings.maxGrantsPerPass) {
          // Each grant adds to a pod's queue: the gate may close part-way through a band.
          if (!pass.gate.open(band)) break;
          const room = this.hasRoom(pass);
          if (!room && !this.mayEvict(pass, band)) {
            stop = true;
            break;
          }
          const ready = this.selectFlow(band, pass.now, settings);
          if (!ready) break;
          if (room) {
            this.grantWaiting(pass, ready, band, false);
          } else if (!this.evictOne(pass)) {
            stop = true;
            break;
          }
        }
      }
      if (stop || pass.grants >= settings.maxGrantsPerPass) break;
    }
  }

  private fifoPass(pass: Pass): void {
    const { settings } = pass;
    while (pass.grants < settings.maxGrantsPerPass) {
      if (!settings.inflightEviction && !this.hasRoom(pass)) return;
      const scanClosed = settings.inflightEviction && !pass.gateTried;
      let best: { at: EarliestHead; band: number } | undefined;
      let first: { at: EarliestHead; band: number; open: boolean } | undefined;
      for (const band of this.bandsHighestFirst()) {
        const open = pass.gate.open(band);
        if (!open && !scanClosed) continue;
        const at = this.selectEarliest(band, pass.now);
        if (!at) continue;
        if (open && (!best || earlier(at, best.at))) best = { at, band };
        if (!first || earlier(at, first.at)) first = { at, band, open };
      }
      if (first && !first.open && this.mayEvict(pass, first.band)) this.gateEviction(pass);
      if (!best) return;
      if (this.hasRoom(pass)) {
        this.grantWaiting(pass, best.at.head, best.band, true);
      } else if (!this.mayEvict(pass, best.band) || !this.evictOne(pass)) {
        return;
      }
    }
  }

  // --- janitor.lua
  runJanitor(now: number, settings: SchedulerSettings): [number, number, number] {
    const batch = settings.janitorBatch;
    const due = this.queueDeadlines.upTo(now, batch);
    for (const id of due) this.expireWaiting(this.requests.get(id) as LocalRequest, now);
    const lapsed = this.leases.upTo(now, batch);
    for (const id of lapsed) this.evictGranted(this.requests.get(id) as LocalRequest, now);
    let cancelled = 0;
    const dead = this.replicas.upTo(now, 1)[0];
    if (dead !== undefined) {
      for (const id of this.waitingByReplica.get(dead)?.head(batch) ?? []) {
        this.endRequest(this.requests.get(id) as LocalRequest, 'cancelled', now);
        cancelled += 1;
      }
      if (!this.waitingByReplica.has(dead)) {
        this.replicas.remove(dead);
        this.notices.delete(dead);
      }
    }
    return [due.length, lapsed.length, cancelled];
  }

  tenantOf(name: string): LocalTenant {
    const tenant = this.tenants.get(name);
    if (!tenant) throw new Error(`internal: tenant ${name} has requests but no configuration`);
    return tenant;
  }

  queueOf(band: number, tenant: string, create: true): SortedSet;
  queueOf(band: number, tenant: string, create: false): SortedSet | undefined;
  queueOf(band: number, tenant: string, create: boolean): SortedSet | undefined {
    const name = queueName(band, tenant);
    let queue = this.queues.get(name);
    if (!queue && create) {
      queue = new SortedSet();
      this.queues.set(name, queue);
    }
    return queue;
  }
}

function queueName(band: number, tenant: string): string {
  return `${band}:${tenant}`;
}

function earlier(a: EarliestHead, b: EarliestHead): boolean {
  return (
    compareOrderKeys({ score: a.score, id: a.head.req.id }, { score: b.score, id: b.head.req.id }) <
    0
  );
}

function podHasRoom(pod: LocalPod): boolean {
  return pod.healthy && pod.inflight < pod.cap;
}

/**
 * The least-loaded pod with room (load = inflight / cap, compared exactly); ties go to the
 * lowest tieBreak(pod) when given (asked of each candidate as the scan meets it), then to the
 * first by name (choosePod in lua/includes/pods.lua).
 */
function leastLoaded(
  pods: readonly LocalPod[],
  tieBreak?: (pod: LocalPod) => number,
): LocalPod | undefined {
  let best: LocalPod | undefined;
  let bestTie = 0;
  for (const pod of pods) {
    if (!podHasRoom(pod)) continue;
    if (!best || pod.inflight * best.cap < best.inflight * pod.cap) {
      best = pod;
      if (tieBreak) bestTie = tieBreak(pod);
    } else if (tieBreak && pod.inflight * best.cap === best.inflight * pod.cap) {
      const key = tieBreak(pod);
      if (key < bestTie) {
        best = pod;
        bestTie = key;
      }
    }
  }
  return best;
}
