import type {
  Band,
  FlowCounters,
  LimitsStanding,
  PodName,
  RejectCode,
  ReleaseOutcome,
  ReplicaId,
  RequestId,
  ScrapedLoad,
  TenantId,
  TenantLimits,
} from '@fairgate/core';
import type {
  PodConfig,
  PodHealth,
  SchedulerSettings,
  SchedulerSettingsInput,
  TenantConfig,
  TokenBucketConfig,
} from './settings.js';

export interface EnqueueRequest {
  /** Unique per request; a retried enqueue with the same id never counts twice. */
  id: RequestId;
  tenant: TenantId;
  /** Priority band (the SLO class priority); higher dispatches first. */
  band: Band;
  /** The replica that waits for the grant, receives notices and heartbeats the lease. */
  replica: ReplicaId;
  /** Accounting label for the outcome counters (default 'standard'). */
  sloClass?: string;
  /** DRR cost units (default 1: shares are counted in requests; unused with the token unit). */
  cost?: number;
  /**
   * The prompt's tokens (the gateway's estimate) and the request's max_tokens, integers >= 0
   * (default 0). With `fairnessUnit: 'tokens'` its charge is worked out from them: input plus
   * max_tokens capped by its tenant's mean output, weighted (core token-cost.ts).
   */
  inputTokens?: number;
  maxTokens?: number;
  /** KV-cache blocks the request may occupy (default 0), checked against max_kv_blocks. */
  kvBlocks?: number;
  /** Deadline in ms from now, for slo-deadline order (default: the queue TTL). */
  deadlineMs?: number;
  /** Queue TTL for this request (default: the pool's queueTtlMs). */
  ttlMs?: number;
  /** Preferred pod, used when it is healthy and under its cap (before any other rule). */
  podHint?: PodName;
  /**
   * Chained hashes of the prompt's first blocks (hashPromptBlocks, at most
   * MAX_PREFIX_BLOCKS; each 1-64 of [A-Za-z0-9_-]). With settings.prefix.enabled the pod is
   * chosen by how much of it each pod recently served against its load, and the granted
   * pod's index learns them (docs/routing.md).
   */
  prefix?: readonly string[];
  /**
   * The LoRA adapter the request asks for (its `model` names an adapter, not the pods' base
   * model; 1-200 of [A-Za-z0-9._:@/-]). With settings.lora.enabled it goes only to a pod
   * that holds it (setPodAdapters), and waits, without holding up other flows, while none
   * of those has room; with settings.lora.load, an adapter no pod holds goes to a pod with a
   * free adapter slot (docs/routing.md, *LoRA adapters*).
   */
  adapter?: string;
  /**
   * Token-bucket cost (estimated tokens), integer >= 0; 0 (default) is not charged. Taken
   * atomically with the enqueue when the tenant has a bucket; given back if the request never
   * gets a slot; trued up at release with ReleaseOptions.actualTokens.
   */
  tokens?: number;
  /**
   * The request's token estimate (input + max_tokens), integer >= 0 (default 0), reserved
   * against its tenant's tokens_per_day and tokens_per_month when it is admitted, trued up
   * at release to the usage's input + output, given back if it never gets a slot. A
   * handover counts it without a check (the request already runs): HandoverResult.limits
   * is the standing after it.
   */
  budgetTokens?: number;
}

/**
 * The standing of a tenant with a budget or a rate, after the enqueue it answers (OpenAI's
 * x-ratelimit-* headers): its requests per minute, and the tighter of its token windows.
 */
export type { LimitStanding, LimitsStanding } from '@fairgate/core';

export type EnqueueResult =
  /**
   * Dispatched at once. `retried`: the id was already live (a retry after a lost reply).
   * `contended`: granted by the dispatch pass that ran after it queued, because other
   * requests waited (absent when it was granted with nothing waiting).
   */
  | {
      status: 'granted';
      pod: PodName;
      retried: boolean;
      contended?: true;
      limits?: LimitsStanding;
    }
  /** Waiting; exactly one 'grant', 'expired' or 'shed' notice follows. */
  | { status: 'queued'; retried: boolean; limits?: LimitsStanding }
  /**
   * Refused, counted under `code`. retryAfterMs: rate_limited and budget_exhausted, when the
   * bucket refills the shortfall or the window ends (absent when the cost exceeds the
   * capacity or the bucket never refills). `limit`: which of the tenant's limits refused
   * (absent for its token bucket and every other rejection).
   * `limits` (every answer but a retry's, for a tenant with a budget or a rate): the
   * tenant's standing after this enqueue.
   */
  | {
      status: 'rejected';
      code: RejectCode;
      retryAfterMs?: number;
      limit?: 'requests' | 'tokens';
      limits?: LimitsStanding;
    };

/**
 * Key of the optional hint on poll()'s answer (an array property, so the answer stays a
 * plain Notice[] through wrappers): ms the pool stays quiet (RedisScheduler.poll).
 */
export const QUIET_MS: unique symbol = Symbol('fairgate.pollQuietMs');

/** poll()'s answer with its optional quiet hint. */
export type PolledNotices = Notice[] & { [QUIET_MS]?: number };

/** What a replica learns on poll(): addressed to the request's owner replica only. */
export type Notice =
  | { kind: 'grant'; id: RequestId; pod: PodName }
  /** Queue TTL reached: the request ended with outcome expired. */
  | { kind: 'expired'; id: RequestId }
  /**
   * The scheduler took the slot back (lease lapsed, or in-flight eviction for a waiting
   * non-sheddable request): abort the upstream request. Outcome evicted.
   */
  | { kind: 'evict'; id: RequestId }
  /** The waiting request was removed by queue shedding. Outcome evicted (drop queue_shed). */
  | { kind: 'shed'; id: RequestId };

export interface ReleaseOptions {
  outcome: ReleaseOutcome;
  /** Actual token usage, counted per tenant and class. */
  usage?: { inputTokens?: number; outputTokens?: number };
  /**
   * Token-bucket true-up: the bucket gets back (charged tokens - actualTokens), capped at
   * its capacity, or is charged the excess (the level may go below zero). Absent: no true-up.
   * Only for a request that was charged (a bucket and tokens > 0 at enqueue) and granted.
   */
  actualTokens?: number;
  /**
   * Prefix routing: the leading prompt blocks (of the pool's kv_block_size) the pod served
   * from its prefix cache, the usage's cached_tokens / block size, at most the request's
   * prefix keys. Checked against the index's prediction at the grant: fewer is a miss, which
   * corrects the pod's index (docs/routing.md). Absent: the pod did not say.
   */
  prefixCachedBlocks?: number;
}

/**
 * handover()'s answer. Handed over: the next request holds the finished one's slot on `pod`,
 * and `contended` says the slot should go back to the pool (through release) when that
 * request ends rather than be handed over again: a request waits, more is in flight than
 * the budget, the tenant is over a quota, the pod is unhealthy or over its cap, or the
 * admission policy or the band's gate would refuse the request. Not handed over: nothing
 * changed.
 */
export type HandoverResult =
  | { handedOver: true; pod: PodName; contended: boolean; limits?: LimitsStanding }
  | { handedOver: false };

/** What an ended id was: 'unknown' means it had already ended (or never existed): no-op. */
export type EndResult = {
  was: 'granted' | 'queued' | 'unknown';
  /**
   * Prefix routing: the leading prompt blocks the pod's index held when the request was
   * granted (the prediction release's prefixCachedBlocks is checked against); absent when
   * the grant made none (no prefix, routing off, not granted).
   */
  predictedBlocks?: number;
};

export interface HeartbeatResult {
  /** Ids the replica named that are no longer its live requests: abort them. */
  lost: RequestId[];
}

export interface ReclaimReport {
  expired: number;
  evicted: number;
  cancelled: number;
}

export interface ConfigureOptions {
  /** 'replace' (default): start and reload; 'seed': only when the pool has no settings. */
  mode?: 'replace' | 'seed';
  /** The writer's config version (kept with the settings as `configHash`). */
  configHash?: string;
}

/** Proof of leadership for a controller write: checked against the stored lease and epoch. */
export interface Fence {
  replica: ReplicaId;
  epoch: number;
}

export type LeadershipResult =
  | { leader: true; epoch: number }
  /** expiresInMs: what is left of the holder's lease (a follower retries when it lapses). */
  | { leader: false; epoch: number; holder: ReplicaId; expiresInMs: number };

/** A fenced controller write: the budget and the controller state, written together. */
export interface ControlWrite {
  budget?: number;
  state?: string;
}

/** What the pods reported for one tenant and model (meterUsage). */
export interface UsageCount {
  tenant: TenantId;
  model: string;
  requests: number;
  inputTokens: number;
  outputTokens: number;
  /** Input tokens the pod served from its prefix cache (part of inputTokens). */
  cachedTokens: number;
}

/** A usage count in the hour (Unix seconds, server clock) it was metered in. */
export interface UsageBucket extends UsageCount {
  hour: number;
}

/** One pod's vLLM gauges as scraped by the leader (reportPodLoad). */
export interface PodLoadReport {
  pod: PodName;
  /** vllm:num_requests_waiting (integer >= 0). */
  waiting: number;
  /** vllm:num_requests_running (integer >= 0). */
  running: number;
  /** vllm:kv_cache_usage_perc (finite, >= 0; normally 0..1). */
  kvUtilization: number;
  /**
   * Prompt blocks (of the gateway's block size) the pod's KV cache holds, from
   * vllm:cache_config_info; absent when the pod does not say. With prefix.entriesPerPod 0
   * each generation of the pod's prefix index holds this many keys (docs/routing.md).
   */
  prefixCapacity?: number;
}

/** One pod's LoRA adapters as the leader sees them (reportPodAdapters). */
export interface PodAdapterReport {
  pod: PodName;
  /** Every adapter it holds now: its /v1/models (but its base model) and lora_requests_info. */
  adapters: readonly string[];
  /** Its adapter slots (vllm:lora_requests_info's max_lora); absent when it does not say. */
  slots?: number;
}

export interface TenantSnapshot {
  tenant: TenantId;
  weight: number;
  queueMax: number | null;
  maxConcurrent: number | null;
  maxKvBlocks: number | null;
  tokenBucket: TokenBucketConfig | null;
  /** Budgets and rates (null where none). */
  limits: TenantLimits;
  /** The standing of its budgets and rate at snapshot time; null when it has none. */
  standing: LimitsStanding | null;
  inflight: number;
  kvBlocks: number;
  waiting: number;
  /** Bucket level in whole tokens at snapshot time (after refill; may be negative). */
  tokens: number | null;
  /**
   * Fairness in tokens: its mean output per request in tokens (the cap on a request's
   * expected output), null before its first sample.
   */
  meanOutputTokens: number | null;
  /**
   * Its service counter in each band it was served in (fairness in tokens): weighted tokens
   * served divided by its weight, in thousandths of a token; `backlogged` while it waits
   * there. Smallest backlogged counter is served next (docs/scheduler.md).
   */
  service: ServiceCounterSnapshot[];
}

export interface ServiceCounterSnapshot {
  band: Band;
  counter: number;
  backlogged: boolean;
}

export interface PodSnapshot {
  name: PodName;
  cap: number;
  healthy: boolean;
  /** Discovery no longer lists it: no new grant; it goes once its requests end (syncPods). */
  leaving: boolean;
  inflight: number;
  /** The last scrape (scrapedAtMs on the store clock), null when never scraped. */
  load: ScrapedLoad | null;
  /** Prompt blocks its KV cache holds, as the last scrape that said reported (else null). */
  prefixCapacity: number | null;
  /** Its LoRA adapter slots, as the last adapter report that said reported (else null). */
  loraSlots: number | null;
  /** The LoRA adapters it holds (reportPodAdapters, and claims a grant made), by name. */
  adapters: string[];
}

export interface SchedulerSnapshot {
  /** Store clock (Redis TIME) when the snapshot was taken. */
  nowMs: number;
  settings: SchedulerSettings | null;
  budget: number;
  controllerState: string | null;
  inflight: number;
  waiting: number;
  waitingByBand: Record<string, number>;
  /** Configured tenants, by id. */
  tenants: TenantSnapshot[];
  /** Pods, by name. */
  pods: PodSnapshot[];
  /** Registered replicas and their liveness expiry (a lapsed one awaits reclaim). */
  replicas: { replica: ReplicaId; livenessExpiresAtMs: number }[];
  leader: ReplicaId | null;
  /** The current leadership epoch (0 before anyone led). */
  epoch: number;
  /** Outcome counters per (tenant, class), by tenant then class. */
  counters: FlowCounters[];
  /** Pool saturation at snapshot time (poolSaturation over pods, settings.saturation). */
  saturation: number;
}

/**
 * Where a replica's notices come from (its queued requests' grants, expiries and sheds, and
 * its running requests' evictions). Every notice is handed out once, by whichever of the two
 * calls comes first; GrantChannel (grant-channel.ts) drives both for a replica.
 */
export interface GrantSource {
  /**
   * Dispatch pass + janitor, then this replica's pending notices (oldest first). While a
   * waitForNotices of this process is in flight the answer may carry `[QUIET_MS]`: for that
   * many ms nothing but this process's own writes, a notice (which that wait delivers) or a
   * change made elsewhere (seen within the bound the implementation documents) can grant or
   * expire anything, so the caller may poll less often meanwhile.
   */
  poll(replica: ReplicaId): Promise<PolledNotices>;
  /**
   * Pending notices, waiting up to timeoutMs for the first one (instant grant wake-up): on
   * RedisScheduler a BLMPOP of the replica's notice list, or the notices a release's reply
   * carried back for it (redis/blocking-notices.ts).
   */
  waitForNotices(replica: ReplicaId, timeoutMs: number): Promise<Notice[]>;
}

/**
 * The shared-state flow-control engine. RedisScheduler (any number of replicas) and
 * LocalScheduler (one process) implement it with identical behaviour; one conformance suite
 * runs against both. docs/scheduler.md describes the semantics.
 */
export interface Scheduler extends GrantSource {
  /**
   * Writes pool settings (validated, defaults filled); the budget only if none is set yet.
   * With `mode: 'seed'` nothing is written when the pool already has settings (restoring a
   * pool whose state was lost: the first replica to restore it wins). Then runs a dispatch
   * pass (and the janitor), as setControl does after a budget write: room a write opens is
   * taken at once, whichever replica made it.
   */
  configure(
    settings?: SchedulerSettingsInput,
    options?: ConfigureOptions,
  ): Promise<SchedulerSettings>;
  upsertTenants(tenants: readonly TenantConfig[]): Promise<void>;
  /** Creates or updates the config's pods: cap and health. */
  upsertPods(pods: readonly PodConfig[]): Promise<void>;
  /**
   * Fenced: the whole set of pods discovery lists now (the leader's write). New ones join
   * with their health; the discovered pods not listed leave (no new grant, their prefix
   * index dropped) and are deleted once none of their requests is in flight. The config's
   * pods are not touched. false (nothing written) when the fence is stale.
   */
  syncPods(fence: Fence, pods: readonly PodConfig[]): Promise<boolean>;
  /** A replica's health checks: existing pods only, never one that is leaving. */
  setPodHealth(pods: readonly PodHealth[]): Promise<void>;
  /** Drops the pods' prefix indexes (they restarted: their KV caches are empty). */
  forgetPrefixes(pods: readonly PodName[]): Promise<void>;
  /**
   * The leader's view of the LoRA adapters each named pod holds: replaces the pod's set,
   * but keeps an adapter a grant claimed on it (settings.lora.load) less than
   * `keepClaimsMs` ago, which the pod's list may not show yet. Pods not configured are
   * ignored. Runs no dispatch pass.
   */
  reportPodAdapters(reports: readonly PodAdapterReport[], keepClaimsMs: number): Promise<void>;
  /** The pod does not hold `adapter` after all (a gateway's load of it failed). */
  dropPodAdapter(pod: PodName, adapter: string): Promise<void>;
  /**
   * Adds usage to the current hour of the store clock, kept `retentionS` after the hour
   * ends. Counts add up across replicas (each sends its own). `flushId` names the call: a
   * retry with the same id (after a timeout) is applied at most once.
   */
  meterUsage(counts: readonly UsageCount[], retentionS: number, flushId: string): Promise<void>;
  /** The usage metered in hours [fromHour, toHour] (Unix seconds, multiples of 3600). */
  readUsage(fromHour: number, toHour: number): Promise<UsageBucket[]>;

  /** Admits a request: granted now, queued for a later grant notice, or rejected. */
  enqueue(request: EnqueueRequest): Promise<EnqueueResult>;
  /** Ends a request whose client left: outcome cancelled. */
  cancel(id: RequestId): Promise<EndResult>;
  /** Ends a request with its outcome and usage, freeing its slot. */
  release(id: RequestId, options: ReleaseOptions): Promise<EndResult>;
  /**
   * Slot recycling: ends `from` as release(from, options) would, and admits `request` into
   * its slot (same pod) in the same step, with no dispatch pass in between: the in-flight
   * counts do not change. Only when `from` is a live granted request of `request.replica`
   * with the same tenant and band, charged to no token bucket, in a band >= 0, with the same
   * KV blocks when the tenant has a KV-block quota (else its KV-block gauge follows), and
   * `request.id` is not live; otherwise nothing happens ({ handedOver: false }) and the
   * caller releases and enqueues as usual. `request` may not carry tokens or a prefix, nor
   * `options` actualTokens (TypeError).
   */
  handover(
    from: RequestId,
    options: ReleaseOptions,
    request: EnqueueRequest,
  ): Promise<HandoverResult>;
  /** Keeps the replica alive and extends the leases of the named granted requests. */
  heartbeat(replica: ReplicaId, ids?: readonly RequestId[]): Promise<HeartbeatResult>;
  /** Runs the janitor now (a leader duty; poll runs it too). */
  reclaim(): Promise<ReclaimReport>;
  snapshot(): Promise<SchedulerSnapshot>;

  /**
   * Takes or renews the leader lease. A new leadership's epoch is above both the stored
   * epoch and `epochFloor` (the highest epoch the caller has seen), so epochs stay
   * monotonic even when the store lost its data.
   */
  acquireLeadership(
    replica: ReplicaId,
    ttlMs: number,
    epochFloor?: number,
  ): Promise<LeadershipResult>;
  renewLeadership(fence: Fence, ttlMs: number): Promise<boolean>;
  releaseLeadership(fence: Fence): Promise<boolean>;
  /**
   * Fenced: false (nothing written) unless fence.replica leads in fence.epoch. Budget and
   * the controller's opaque state (so a new leader continues from it) in one atomic write;
   * either may be omitted. A written budget is followed by a dispatch pass (and the
   * janitor): a raised budget's room is granted at once.
   */
  setControl(fence: Fence, write: ControlWrite): Promise<boolean>;
  /**
   * Fenced: the most requests in flight at once pool-wide since the previous take (every
   * grant raises it), restarted from the current in-flight; null (nothing reset) when stale.
   */
  takeInflightPeak(fence: Fence): Promise<number | null>;
  /**
   * Fenced: the leader's scrape of the pods' vLLM gauges, stamped with the store clock.
   * Pods not configured are ignored. false (nothing written) when the fence is stale.
   */
  reportPodLoad(fence: Fence, loads: readonly PodLoadReport[]): Promise<boolean>;
  /** Fenced: one field of the leader's durable state (e.g. the capacity tuner's JSON). */
  setLeaderData(fence: Fence, field: string, value: string): Promise<boolean>;
  /** A field written by setLeaderData, null when never written. */
  getLeaderData(field: string): Promise<string | null>;

  /** Adds TTFT histogram counts (bucket index -> count) to the current store second. */
  flushLatency(counts: ReadonlyMap<number, number>): Promise<void>;
  /** Bucket counts merged over the last `seconds` store seconds (current one included). */
  readLatencyWindow(seconds: number): Promise<Map<number, number>>;

  /** Releases connections and timers; the shared state stays. */
  close(): Promise<void>;
}
