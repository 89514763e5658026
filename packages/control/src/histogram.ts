/**
 * Log-bucket latency histogram (seconds). Buckets are geometric: BUCKETS_PER_DOUBLING per
 * factor of two, so every finite bucket spans a ratio of 2^(1/16) ≈ 1.0443. A quantile read
 * from the counts is interpolated inside the bucket that holds the exact quantile, so it is
 * within 4.5% of the exact value for any sample between the smallest and largest finite
 * edge (test/histogram-accuracy.test.ts checks this on random distributions).
 *
 * Index layout (what replicas flush to `lat:<second>` and the window merges):
 *   0            underflow [0, MIN_EDGE_S)
 *   1..FINITE    [edge(i-1), edge(i))
 *   OVERFLOW     [edge(FINITE), ∞): a quantile landing here clamps to the largest finite edge
 * The layout is part of the shared state: changing the constants needs a new window key.
 */
export const BUCKETS_PER_DOUBLING = 16;
/** Lower edge of the first finite bucket: 0.1 ms, below any TTFT through a network hop. */
export const MIN_EDGE_S = 1e-4;
/** Number of finite buckets: edges reach 1e-4 * 2^(361/16) ≈ 619 s (10 minutes). */
export const FINITE_BUCKETS = 361;
export const UNDERFLOW_INDEX = 0;
export const OVERFLOW_INDEX = FINITE_BUCKETS + 1;

/** edges[i] = MIN_EDGE_S * 2^(i/16), i = 0..FINITE_BUCKETS; bucket i (1..FINITE) ends at edges[i]. */
const EDGES: readonly number[] = Array.from(
  { length: FINITE_BUCKETS + 1 },
  (_, i) => MIN_EDGE_S * 2 ** (i / BUCKETS_PER_DOUBLING),
);

/** The largest finite edge: where the overflow bucket clamps. */
export const LARGEST_EDGE_S = EDGES[FINITE_BUCKETS] as number;

function edge(i: number): number {
  return EDGES[i] as number;
}

/** [lower, upper) of a bucket; the overflow bucket is [largest edge, ∞). */
export function bucketBounds(index: number): [number, number] {
  assertBucket(index);
  if (index === UNDERFLOW_INDEX) return [0, MIN_EDGE_S];
  if (index === OVERFLOW_INDEX) return [LARGEST_EDGE_S, Number.POSITIVE_INFINITY];
  return [edge(index - 1), edge(index)];
}

export function isBucketIndex(index: number): boolean {
  return Number.isInteger(index) && index >= UNDERFLOW_INDEX && index <= OVERFLOW_INDEX;
}

function assertBucket(index: number): void {
  if (!isBucketIndex(index)) {
    throw new RangeError(
      `latency bucket must be an integer in [0, ${OVERFLOW_INDEX}], got ${index}`,
    );
  }
}

/** The bucket holding a latency in seconds (>= 0, finite or +Infinity). */
export function bucketOf(seconds: number): number {
  if (!(seconds >= 0)) throw new RangeError(`latency must be >= 0 seconds, got ${seconds}`);
  if (seconds < MIN_EDGE_S) return UNDERFLOW_INDEX;
  if (seconds >= LARGEST_EDGE_S) return OVERFLOW_INDEX;
  // The logarithm can be off by one ulp at an edge; the table decides.
  let index = Math.floor(BUCKETS_PER_DOUBLING * Math.log2(seconds / MIN_EDGE_S)) + 1;
  index = Math.min(Math.max(index, 1), FINITE_BUCKETS);
  while (index > 1 && seconds < edge(index - 1)) index -= 1;
  while (index < FINITE_BUCKETS && seconds >= edge(index)) index += 1;
  return index;
}

/** Bucket index -> count. The form flushed to and merged from the shared window. */
export type BucketCounts = ReadonlyMap<number, number>;

export function totalCount(counts: BucketCounts): number {
  let total = 0;
  for (const count of counts.values()) total += count;
  return total;
}

/** Adds `from` into `into` (both bucket -> count). */
export function mergeCounts(into: Map<number, number>, from: BucketCounts): Map<number, number> {
  for (const [bucket, count] of from) {
    assertBucket(bucket);
    if (count > 0) into.set(bucket, (into.get(bucket) ?? 0) + count);
  }
  return into;
}

/**
 * The q-quantile (0 < q <= 1) of the counted samples: the bucket where the cumulative count
 * reaches q * total, linearly interpolated inside it; the overflow bucket clamps to the
 * largest finite edge. NaN when there are no samples (an idle window).
 */
export function quantile(counts: BucketCounts, q: number): number {
  if (!(q > 0 && q <= 1)) throw new RangeError(`quantile must be in (0, 1], got ${q}`);
  const buckets = [...counts].filter(([, count]) => count > 0).sort((a, b) => a[0] - b[0]);
  let total = 0;
  for (const [bucket, count] of buckets) {
    assertBucket(bucket);
    total += count;
  }
  if (total === 0) return Number.NaN;
  const rank = q * total;
  let below = 0;
  for (const [bucket, count] of buckets) {
    if (below + count >= rank) {
      if (bucket === OVERFLOW_INDEX) return LARGEST_EDGE_S;
      const [lower, upper] = bucketBounds(bucket);
      return lower + ((rank - below) / count) * (upper - lower);
    }
    below += count;
  }
  // Only reachable through rounding of q * total: the top sample's bucket.
  const [last] = buckets[buckets.length - 1] as [number, number];
  return last === OVERFLOW_INDEX ? LARGEST_EDGE_S : bucketBounds(last)[1];
}

/** A replica's accumulator: observe latencies, then take the counts to flush. */
export class LatencyHistogram {
  #counts = new Map<number, number>();

  observe(seconds: number): void {
    const bucket = bucketOf(seconds);
    this.#counts.set(bucket, (this.#counts.get(bucket) ?? 0) + 1);
  }

  /** Adds counts back (a flush that failed is retried with the next one). */
  add(counts: BucketCounts): void {
    mergeCounts(this.#counts, counts);
  }

  get size(): number {
    return totalCount(this.#counts);
  }

  /** Returns the counts so far and starts empty. */
  take(): Map<number, number> {
    const taken = this.#counts;
    this.#counts = new Map();
    return taken;
  }
}
