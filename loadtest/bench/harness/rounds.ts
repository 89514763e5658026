/**
 * The order a bench measures its paths in, per round. On a shared machine the phase that runs
 * right after the baseline tends to come out ahead, so a path and its twin (the same path of
 * the BENCH_COMPARE_WITH checkout) run back to back and swap places every other round: over an
 * even number of rounds each runs first equally often. The baseline stays first (every ratio is
 * to it), and paths without a twin keep their place.
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
