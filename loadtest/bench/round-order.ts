/**
 * The order bench:overhead measures its paths in, per round. On a shared 2-core machine the
 * phase that runs first after the direct row tends to come out ahead
 * (docs/performance-history.md, *Eighth round*: the first gateway of a round won in both
 * directions of one comparison), so a tree and its BENCH_COMPARE_WITH twin run back to back
 * (the same conditions, drift between them minimal) and swap places every other round: over
 * an even number of rounds each runs first equally often. The direct row stays first (every
 * ratio is to it), and paths without a twin keep their place.
 */
export function roundOrder<P extends string>(
  paths: readonly P[],
  round: number,
  twinOf: (path: P) => P | undefined,
): P[] {
  const twins = new Set(paths.map(twinOf).filter((twin): twin is P => twin !== undefined));
  const order: P[] = [];
  for (const path of paths) {
    if (twins.has(path)) continue; // placed with the path it twins
    const twin = twinOf(path);
    if (twin === undefined || !paths.includes(twin)) order.push(path);
    else if (round % 2 === 1) order.push(path, twin);
    else order.push(twin, path);
  }
  return order;
}
