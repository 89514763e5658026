/**
 * How the benches summarise and print: medians over rounds, per-round ratios against a
 * baseline measured in the same run, quantiles, a goal's verdict and aligned tables.
 */

/** The median of the values that are numbers (NaN when none is). */
export function median(values: readonly number[]): number {
  const sorted = values.filter((v) => !Number.isNaN(v)).sort((a, b) => a - b);
  if (sorted.length === 0) return Number.NaN;
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** The q-quantile of values sorted ascending (nearest rank). */
export function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

/** f over the runs of two paths round by round (the same conditions), then the median. */
export function perRound<R>(
  a: readonly R[] | undefined,
  b: readonly R[] | undefined,
  f: (x: R, y: R) => number,
): number {
  return a && b ? median(a.map((x, i) => f(x, b[i]!))) : Number.NaN;
}

export const verdict = (met: boolean) => (met ? 'met' : 'NOT met');

/** A signed percentage: +1.5%, -12.0%; n/a when not finite. */
export const pct = (v: number, digits = 1) =>
  Number.isFinite(v) ? `${v >= 0 ? '+' : ''}${(v * 100).toFixed(digits)}%` : 'n/a';

/** A number with thousands separators. */
export function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', {
    minimumFractionDigits: digits,
    maximumFractionDigits: digits,
  });
}

/** A markdown-style table, every column padded to its widest cell. */
export function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((title, c) => Math.max(title.length, ...rows.map((r) => r[c]!.length)));
  const render = (cells: readonly string[]) =>
    `| ${cells.map((cell, c) => cell.padStart(widths[c]!)).join(' | ')} |`;
  return [
    render(header),
    `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`,
    ...rows.map(render),
  ].join('\n');
}
