/** Small statistics helpers shared by the live view, the summary and the report. */

/** Nearest-rank percentile (q in [0, 1]) of unsorted values; NaN when empty. */
export function percentile(values: readonly number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return percentileSorted(sorted, q);
}

export function percentileSorted(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil(q * sorted.length) - 1;
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank))]!;
}

export function mean(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  let sum = 0;
  for (const v of values) sum += v;
  return sum / values.length;
}

/** `12.3` / `-` for NaN. */
export function fmt(value: number, digits = 0): string {
  return Number.isFinite(value) ? value.toFixed(digits) : '-';
}

/** Milliseconds as `850ms` or `1.24s`. */
export function fmtMs(ms: number): string {
  if (!Number.isFinite(ms)) return '-';
  return ms < 1_000 ? `${ms.toFixed(0)}ms` : `${(ms / 1_000).toFixed(2)}s`;
}

export function pct(part: number, whole: number): number {
  return whole > 0 ? (100 * part) / whole : 0;
}
