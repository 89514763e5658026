/**
 * Every admitted request ends in exactly one terminal outcome. Together with rejections at
 * enqueue they give the conservation identities checked pool-wide:
 *   offered  = admitted + rejected
 *   admitted = completed + expired + cancelled + evicted + upstream_error  (once quiescent)
 */
export const OUTCOMES = ['completed', 'expired', 'cancelled', 'evicted', 'upstream_error'] as const;
export type Outcome = (typeof OUTCOMES)[number];

/**
 * Outcomes a gateway reports when it ends a request itself. `expired` is only ever decided
 * by the scheduler (queue TTL), never claimed by a caller.
 */
export const RELEASE_OUTCOMES = ['completed', 'cancelled', 'evicted', 'upstream_error'] as const;
export type ReleaseOutcome = (typeof RELEASE_OUTCOMES)[number];

export function isOutcome(value: string): value is Outcome {
  return (OUTCOMES as readonly string[]).includes(value);
}

export function isReleaseOutcome(value: string): value is ReleaseOutcome {
  return (RELEASE_OUTCOMES as readonly string[]).includes(value);
}
