/**
 * The order of a round's paths. On a shared machine the phase right after the baseline tends to
 * come out ahead, so a path and its BENCH_COMPARE_WITH twin run back to back and swap places
 * every other round (an even BENCH_ROUNDS puts each first equally often). The baseline stays
 * first; paths without a twin keep their place.
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
