import { expectConserved, type GenerateResult, type Pool, sleep } from './pool.js';

/**
 * Conservation seen from outside the gateway. `expectConserved` checks the gateway's own
 * counters against each other; this checks them against what the clients received and what
 * the sims (the pods) served, so a request the gateway counted but never answered, answered
 * twice, or sent to a pod it did not count, shows.
 */
export interface Ledger {
  /** Pool-wide sums of the gateway's flow counters (every tenant, band and class). */
  offered: number;
  completed: number;
  cancelled: number;
  upstreamError: number;
  /** Requests every sim received (its /debug/stats), and those running there now. */
  simsReceived: number;
  simsActive: number;
}

interface SimStats {
  requests_received: number;
  active_requests: number;
}

/** The three ledgers' counts now: take one before the load, compare after it. */
export async function ledger(pool: Pool, replica = 0): Promise<Ledger> {
  const state = await pool.state(replica);
  const sims = await Promise.all(
    pool.sims.map(
      async (sim) => (await (await fetch(`${sim.url}/debug/stats`)).json()) as SimStats,
    ),
  );
  const sum = (pick: (row: (typeof state.counters)[number]) => number) =>
    state.counters.reduce((total, row) => total + pick(row), 0);
  return {
    offered: sum((row) => row.offered),
    completed: sum((row) => row.outcomes.completed),
    cancelled: sum((row) => row.outcomes.cancelled),
    upstreamError: sum((row) => row.outcomes.upstream_error),
    simsReceived: sims.reduce((total, s) => total + s.requests_received, 0),
    simsActive: sims.reduce((total, s) => total + s.active_requests, 0),
  };
}

/**
 * After `expectConserved`, against the ledger taken before the load (`before`) and every
 * answer the clients got (`answers`, all sent since `before`):
 * - the gateway was offered exactly the requests the clients sent;
 * - its completions are exactly the clients' 200s that ended whole;
 * - the sims received every completed request, and no more than completed + cancelled +
 *   upstream errors (a request that expired or was rejected never reached a pod);
 * - no sim still runs a request.
 */
export async function expectClientsAndSimsAgree(
  pool: Pool,
  before: Ledger,
  answers: readonly Pick<GenerateResult, 'status' | 'streamError'>[],
  options: { timeoutMs?: number; replica?: number } = {},
): Promise<Ledger> {
  const { timeoutMs = 10_000, replica = 0 } = options;
  await expectConserved(pool, timeoutMs, replica);
  let after = await ledger(pool, replica);
  const deadline = Date.now() + 2_000;
  while (after.simsActive > 0 && Date.now() < deadline) {
    await sleep(20);
    after = await ledger(pool, replica);
  }
  const offered = after.offered - before.offered;
  const completed = after.completed - before.completed;
  const mayHaveReachedPods =
    completed + (after.cancelled - before.cancelled) + (after.upstreamError - before.upstreamError);
  const received = after.simsReceived - before.simsReceived;
  const whole = answers.filter((a) => a.status === 200 && a.streamError === null).length;
  const problems = [
    offered !== answers.length && `gateway offered ${offered} != clients sent ${answers.length}`,
    completed !== whole && `gateway completed ${completed} != clients' whole 200s ${whole}`,
    received < completed && `sims received ${received} < gateway completed ${completed}`,
    received > mayHaveReachedPods &&
      `sims received ${received} > completed + cancelled + upstream errors ${mayHaveReachedPods}`,
    after.simsActive !== 0 && `sims still run ${after.simsActive} requests`,
  ].filter((p): p is string => typeof p === 'string');
  if (problems.length > 0)
    throw new Error(`clients, gateway and sims disagree: ${problems.join('; ')}`);
  return after;
}
