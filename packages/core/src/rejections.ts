/**
 * Why a request was refused at enqueue. The string value is the drop reason shown to
 * clients (`x-fairgate-drop-reason`) and used as a metrics label, so values are stable.
 */
export enum RejectCode {
  /** The tenant already has queue_max requests waiting. */
  TenantQueueFull = 'tenant_queue_full',
  /** The request's priority band already holds its capacity of waiting requests. */
  BandFull = 'band_full',
  /** The pool-wide queue depth limit is reached. */
  GlobalQueueFull = 'global_queue_full',
  /** The tenant's max_concurrent is 0: this request could never be dispatched. */
  QuotaConcurrencyNeverFits = 'quota_concurrency',
  /** The request alone needs more KV blocks than the tenant's max_kv_blocks. */
  QuotaKvBlocksNeverFits = 'quota_kv_blocks',
  /** No pod is healthy: waiting could only end in a queue TTL expiry. */
  NoHealthyPod = 'no_healthy_pod',
  /** The tenant's token bucket does not hold the request's cost (see retryAfterMs). */
  RateLimited = 'rate_limited',
  /** tier-shed admission: a pod is overloaded and the priority is below the minimum. */
  ShedByTier = 'shed_by_tier',
  /** gaie-legacy admission: a sheddable request while pool saturation >= 1. */
  Saturated = 'saturated',
  /** reject-all admission. */
  RejectedByPolicy = 'rejected_by_policy',
}

/**
 * Every value `x-fairgate-drop-reason` (and the drops metric's reason label) can take: the
 * rejection codes, plus the drops decided after admission (queue TTL, eviction, shedding).
 */
export type DropReason = RejectCode | 'queue_ttl' | 'evicted' | 'queue_shed';

/** How a drop is rendered over HTTP: 429 with a drop reason, or 503 for no capacity at all. */
export interface DropResponse {
  status: 429 | 503;
  /** Value of `x-fairgate-drop-reason`. */
  dropReason: DropReason;
}

export function rejectionResponse(code: RejectCode): DropResponse {
  if (code === RejectCode.NoHealthyPod) return { status: 503, dropReason: code };
  return { status: 429, dropReason: code };
}

/** What a scheduler notice that ends a request says: waiting too long, shed, or evicted. */
export type DropNotice = 'expired' | 'evict' | 'shed';

/**
 * The drop a scheduler notice ends a request with (the one notice -> drop reason table): 'expired' (queue TTL) -> 429 queue_ttl,
 * 'evict' (lease lapsed or in-flight eviction) -> 429 evicted, 'shed' (a waiting request
 * replaced by a higher-priority arrival under queue shedding; its outcome is evicted) ->
 * 429 queue_shed.
 */
export function noticeDropResponse(kind: DropNotice): DropResponse {
  switch (kind) {
    case 'expired':
      return { status: 429, dropReason: 'queue_ttl' };
    case 'evict':
      return { status: 429, dropReason: 'evicted' };
    case 'shed':
      return { status: 429, dropReason: 'queue_shed' };
  }
}
