/**
 * Why a request was refused at enqueue. The string value is the drop reason shown to
 * clients (`x-fairgate-drop-reason`) and used as a metrics label, so values are stable.
 * How each is answered over HTTP: outcome-table.ts.
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
  /**
   * The tenant's token bucket does not hold the request's cost, or its requests_per_minute
   * are spent for this minute (see retryAfterMs).
   */
  RateLimited = 'rate_limited',
  /** The tenant's tokens_per_day or tokens_per_month are spent until the window ends. */
  BudgetExhausted = 'budget_exhausted',
  /** tier-shed admission: a pod is overloaded and the priority is below the minimum. */
  ShedByTier = 'shed_by_tier',
  /** gaie-legacy admission: a sheddable request while pool saturation >= 1. */
  Saturated = 'saturated',
  /** reject-all admission. */
  RejectedByPolicy = 'rejected_by_policy',
}
