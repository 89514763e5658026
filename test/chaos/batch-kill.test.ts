import { sha256Hex, TEST_KEYS } from '@fairgate/testkit';
import { QueueEvents } from 'bullmq';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  batchInput,
  customIdCounts,
  fileLines,
  sdk,
  submitBatch,
  waitForBatch,
  waitForProgress,
} from '../support/batch.js';
import { expectConserved, metricSum, type Pool, startPool } from '../support/pool.js';

/**
 * kill -9 of a replica mid-batch (docs/batch.md, *Crashes*): its worker's lines stop
 * renewing their BullMQ locks, and after `batch.stalled_ms` the other replica's stalled
 * check runs them again; its in-flight requests' leases expire and the leader's janitor
 * reclaims them. The test shows the recovery ran: the killed replica was running lines
 * (its fairgate_batch_lines_running), BullMQ's stalled check reported those lines (their
 * locks expired with the replica), and each of them is in the output, answered 200. The
 * batch completes with every custom_id exactly once in the output (results are written once
 * per line: a line run twice counts once), none in the error file, and nothing is left in
 * flight.
 */
const LINES = 600;

describe('kill -9 of a replica mid-batch (Redis, 2 sims, 2 replicas)', () => {
  let pool: Pool;

  beforeAll(async () => {
    pool = await startPool({
      replicas: 2,
      // 20 ms iterations: a line of 8 tokens holds its slot ~0.2 s; the batch takes ~8 s.
      sims: [{ 'alpha-ms': 20 }, { 'alpha-ms': 20 }],
      podCap: 8,
      budget: 16,
      tenants: [{ id: 'paying', api_key_sha256: [sha256Hex(TEST_KEYS.paying)], queue_max: 1_000 }],
      scheduler: { queue_ttl_ms: 5_000, lease_ttl_ms: 3_000 },
      sections: {
        batch: { concurrency: 16, stalled_ms: 2_000, retry_base_ms: 100, retry_max_ms: 1_000 },
      },
    });
  }, 60_000);

  afterAll(async () => {
    await pool?.stop();
  });

  it('the killed replica held lines, they ran again; every custom_id exactly once', async () => {
    const [survivor, victim] = pool.gateways;
    const client = sdk(survivor!, TEST_KEYS.paying);
    // BullMQ's own events: a stalled job is one whose worker stopped renewing its lock.
    const { pool: poolName } = await pool.state();
    const events = new QueueEvents('batch', {
      connection: { host: '127.0.0.1', port: pool.redis.port },
      prefix: `{fg:${poolName}}`,
    });
    const stalled = new Set<string>();
    events.on('stalled', ({ jobId }) => stalled.add(jobId));
    try {
      await events.waitUntilReady();
      const batch = await submitBatch(client, batchInput(LINES, 8));
      const progress = await waitForProgress(client, batch.id, LINES / 4);
      expect(progress.status).toBe('in_progress');
      const before = (await pool.state(1)).inflight;
      const held = await metricSum(victim!.url, 'fairgate_batch_lines_running');
      await victim!.kill();
      const atKill = progress.request_counts?.completed ?? 0;
      expect(held, 'lines the victim was running when killed').toBeGreaterThan(0);

      const ended = await waitForBatch(client, batch.id, 90_000);
      expect(ended.status).toBe('completed');
      expect(ended.request_counts).toEqual({ total: LINES, completed: LINES, failed: 0 });
      expect(ended.error_file_id).toBeNull();
      const output = await fileLines(client, ended.output_file_id);
      const counts = customIdCounts(output);
      expect(output).toHaveLength(LINES);
      expect(counts.size).toBe(LINES);
      for (let i = 0; i < LINES; i++) expect(counts.get(`line-${i}`)).toBe(1);
      expect(output.every((line) => line.response?.status_code === 200)).toBe(true);
      // The victim's lines were taken by the stalled check (line jobs are `<batch>.<index>`)
      // and are in the output, answered.
      const rerun = [...stalled].filter((id) => id.startsWith(`${batch.id}.`));
      const picture = `victim running ${held} lines at the kill; stalled jobs ${JSON.stringify(rerun)}`;
      expect(rerun.length, picture).toBeGreaterThan(0);
      const answered = new Set(
        output.filter((l) => l.response?.status_code === 200).map((l) => l.custom_id),
      );
      for (const id of rerun) {
        expect(answered.has(`line-${id.slice(batch.id.length + 1)}`), picture).toBe(true);
      }
      // The killed replica's requests were reclaimed: nothing waits or runs pool-wide.
      await expectConserved(pool, 20_000, 0);
      console.log(
        `batch-kill: killed replica 2 at ${atKill}/${LINES} lines done (${before} in flight pool-wide, ${held} lines its worker ran; ${rerun.length} stalled and ran again); the batch completed ${ended.completed_at! - ended.in_progress_at!} s after it started`,
      );
    } finally {
      await events.close();
    }
  }, 150_000);
});
