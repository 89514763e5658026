/**
 * Per-tenant token bucket, as pure arithmetic. The scheduler applies the same
 * rules inside its enqueue and release scripts (server time), so the bucket is
 * exact across replicas; this module is the reference the Lua mirrors and the
 * LocalScheduler uses.
 *
 * A bucket holds `level` tokens out of `capacity` and refills at `refillPerSecond`.
 * A request costs its estimated input tokens (optionally + max_tokens). When the
 * level covers the cost it is taken; otherwise nothing changes and the caller
 * gets Retry-After = the time the shortfall takes to refill. At release the
 * bucket is trued up by (estimated - actual): over-estimates come back, under-
 * estimates are charged (the level may go below zero, delaying the next request).
 *
 * Levels are kept in milli-tokens so that refills stay exact integers (a
 * refill of r tokens/s over e ms is e * r milli-tokens, an integer for integer r
 * and whole milliseconds): a level kept in tokens drifts
 * by rounding and a long run would lose whole tokens at boundaries.
 *
 * Rules the scheduler adds around these (lua/includes/bucket.lua, LocalEngine):
 * a bucket with no state yet is full (currentBucket); lowering the capacity clamps
 * the level at the next refill; a request that never gets a slot (rejected by a
 * queue cap, expired, cancelled or shed while waiting) gets its whole cost back
 * (trueUp with actual 0).
 */
export interface BucketConfig {
  capacity: number;
  refillPerSecond: number;
}

export interface BucketState {
  /** Milli-tokens (1 token = 1000). */
  levelMilli: number;
  /** ms of the last refill. */
  updatedAtMs: number;
}

export function refill(state: BucketState, config: BucketConfig, nowMs: number): BucketState {
  const elapsed = Math.max(0, nowMs - state.updatedAtMs);
  const levelMilli = Math.min(
    config.capacity * 1_000,
    state.levelMilli + elapsed * config.refillPerSecond,
  );
  return { levelMilli, updatedAtMs: Math.max(nowMs, state.updatedAtMs) };
}

export type TakeResult =
  | { ok: true; state: BucketState }
  | { ok: false; state: BucketState; retryAfterMs: number; neverFits: boolean };

export function take(
  state: BucketState,
  config: BucketConfig,
  cost: number,
  nowMs: number,
): TakeResult {
  const current = refill(state, config, nowMs);
  if (cost > config.capacity) {
    return { ok: false, state: current, retryAfterMs: Number.POSITIVE_INFINITY, neverFits: true };
  }
  const costMilli = cost * 1_000;
  if (current.levelMilli >= costMilli) {
    return { ok: true, state: { ...current, levelMilli: current.levelMilli - costMilli } };
  }
  const shortfallMilli = costMilli - current.levelMilli;
  const retryAfterMs =
    config.refillPerSecond > 0
      ? Math.ceil(shortfallMilli / config.refillPerSecond)
      : Number.POSITIVE_INFINITY;
  return { ok: false, state: current, retryAfterMs, neverFits: false };
}

/** Release-time correction: gives back over-estimates, charges under-estimates. */
export function trueUp(
  state: BucketState,
  config: BucketConfig,
  estimated: number,
  actual: number,
  nowMs: number,
): BucketState {
  const current = refill(state, config, nowMs);
  return {
    ...current,
    levelMilli: Math.min(
      config.capacity * 1_000,
      current.levelMilli + (estimated - actual) * 1_000,
    ),
  };
}

/** A fresh bucket starts full. */
export function fullBucket(config: BucketConfig, nowMs: number): BucketState {
  return { levelMilli: config.capacity * 1_000, updatedAtMs: nowMs };
}

/** The bucket at nowMs: refilled from its state, or full when it has none yet. */
export function currentBucket(
  state: BucketState | null | undefined,
  config: BucketConfig,
  nowMs: number,
): BucketState {
  return refill(state ?? fullBucket(config, nowMs), config, nowMs);
}

/** The level in whole tokens (rounded down; negative after an under-estimate). */
export function wholeTokens(state: BucketState): number {
  return Math.floor(state.levelMilli / 1_000);
}
