import { sha256Hex, TEST_KEYS } from '@fairgate/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  batchInput,
  customIdCounts,
  fileLines,
  sdk,
  submitBatch,
  waitForBatch,
} from './support/batch.js';
import {
  type GenerateResult,
  generate,
  openLoop,
  type Pool,
  percentile,
  sleep,
  startPool,
  tally,
} from './support/pool.js';

/**
 * Batch work backfills idle capacity and nothing else (docs/batch.md, *Backfill*). Two sims
 * (cap 16 each, budget 32) behind two replicas; an interactive `standard` tenant streams at
 * about half the pool's capacity, first alone, then while another tenant's 1,800-line batch
 * runs at class `batch` (priority -1: below every interactive request in the dispatch
 * order, and evicted from its slot when an interactive request finds none). The interactive
 * p99 TTFT with the batch stays within 10% of the same load without it, no interactive
 * request is dropped, the pool stays ≥ 90% busy while the batch runs, and it completes.
 */
const BUDGET = 32;
/**
 * 120 ms iterations, 4 output tokens: ~0.6 s a request, ~53 requests/s for the pool. Long
 * iterations keep the TTFT (one to two of them) large against the CPU the batch adds on a
 * 2-core machine running the load, the sims, Redis and both replicas: a full sim spends more
 * CPU per iteration than a half-full one, and the replicas relay the batch's lines too, which
 * delays every process's event loop by milliseconds. At 25 ms that measured x1.635 under
 * load; at 50 ms x1.03-x1.13 (over x1.10 in two of three full CI runs on one day); at 80 ms
 * x1.088 and x1.108 in two CI runs on a slower VM (p50 +6% and +14%: a shift, not noise).
 */
const ALPHA_MS = 120;
const MAX_TOKENS = 4;
/** About half the pool's capacity. */
const INTERACTIVE_RATE = 27;
/**
 * 45 s a phase: ~1,200 requests, so the p99 is the 12th slowest. At 12 s (768 requests at
 * 64/s, the 8th slowest) one stall of the shared 2-core machine (GC, another process) that
 * caught a dozen requests in one phase decided the ratio: x0.74 to x1.18 over eight runs of
 * the same tree on one day.
 */
const PHASE_MS = 45_000;
/**
 * ~34 s alone at full capacity: the second phase (and the 2 s before it) leaves the batch
 * about half the pool, ~1,300 lines, so it still runs through the whole phase with ~500 to
 * spare, which then take the whole pool for ~10 s. 2,500 lines ran ~25 s after the phase
 * and 5,000 ~70 s, for no more evidence.
 */
const LINES = 1_800;

describe('a 1,800-line batch backfills a half-loaded pool (Redis, 2 sims, 2 replicas)', () => {
  let pool: Pool;

  beforeAll(async () => {
    pool = await startPool({
      replicas: 2,
      sims: [{ 'alpha-ms': ALPHA_MS }, { 'alpha-ms': ALPHA_MS }],
      podCap: BUDGET / 2,
      budget: BUDGET,
      tenants: [
        { id: 'paying', api_key_sha256: [sha256Hex(TEST_KEYS.paying)], queue_max: 1_000 },
        { id: 'free', api_key_sha256: [sha256Hex(TEST_KEYS.free)], queue_max: 1_000 },
      ],
      scheduler: { inflight_eviction: true },
      sections: { batch: { concurrency: BUDGET, retry_base_ms: 200, retry_max_ms: 2_000 } },
    });
  }, 60_000);

  afterAll(async () => {
    await pool?.stop();
  });

  /** The interactive tenant's open-loop streams, half through each replica. */
  const interactive = (): Promise<GenerateResult[]> =>
    openLoop(INTERACTIVE_RATE, PHASE_MS, (i) =>
      generate(pool.gateways[i % 2]!.url, TEST_KEYS.paying, {
        stream: true,
        maxTokens: MAX_TOKENS,
        signal: AbortSignal.timeout(30_000),
      }),
    );

  const ttftP99 = (results: readonly GenerateResult[]) =>
    percentile(
      results.filter((r) => r.status === 200).map((r) => r.ttftMs!),
      99,
    );

  /**
   * One retry: the ratio is of two p99s measured a minute apart on a shared 2-core machine,
   * and a stall of the host in one phase moves it by a few percent (x1.1006 in one CI run).
   * A second pair of phases is a new measurement of the same claim, not a looser bound.
   */
  it('interactive p99 TTFT within 10%, no interactive drop, pool ≥ 90% busy, batch completes', {
    retry: 1,
    timeout: 300_000,
  }, async () => {
    const alone = await interactive();
    expect(tally(alone)).toEqual({ 200: alone.length });

    const client = sdk(pool.gateways[0]!, TEST_KEYS.free);
    const batch = await submitBatch(client, batchInput(LINES, MAX_TOKENS));
    // Busy capacity: the pool's in-flight requests over its budget, sampled every 100 ms.
    const busy: number[] = [];
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const state = await pool.state(0);
        if (state.waiting + state.inflight > 0 || busy.length > 0) {
          busy.push(state.inflight / state.budget);
        }
        await sleep(100);
      }
    })();
    // The batch's lines fill the pool before the interactive load starts again.
    await sleep(2_000);
    const withBatch = await interactive();
    const ended = await waitForBatch(client, batch.id, 180_000, 500);
    sampling = false;
    await sampler;
    // The last samples are the batch's tail (fewer lines left than slots): not "while it runs".
    const running = busy.slice(0, Math.max(1, busy.length - 10));
    const meanBusy = running.reduce((sum, b) => sum + b, 0) / running.length;

    const p99Alone = ttftP99(alone);
    const p99With = ttftP99(withBatch);
    console.log(
      `batch-backfill: interactive p99 TTFT ${p99Alone.toFixed(1)} ms alone, ${p99With.toFixed(1)} ms with the batch (x${(p99With / p99Alone).toFixed(3)}); p50 ${percentile(
        alone.map((r) => r.ttftMs!),
        50,
      ).toFixed(1)} / ${percentile(
        withBatch.map((r) => r.ttftMs!),
        50,
      ).toFixed(
        1,
      )} ms; pool busy ${(meanBusy * 100).toFixed(1)}% over ${running.length} samples; batch of ${LINES} lines in ${ended.completed_at! - ended.in_progress_at!} s; ${JSON.stringify(tally(withBatch))}`,
    );
    expect(tally(withBatch)).toEqual({ 200: withBatch.length });
    expect(p99With).toBeLessThanOrEqual(p99Alone * 1.1);
    expect(meanBusy).toBeGreaterThanOrEqual(0.9);
    expect(ended.status).toBe('completed');
    expect(ended.request_counts).toEqual({ total: LINES, completed: LINES, failed: 0 });
    const output = await fileLines(client, ended.output_file_id);
    expect(customIdCounts(output).size).toBe(LINES);
  });
});
