import { RedisScheduler } from '@fairgate/scheduler';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectConserved, type Pool, sleep, startPool } from '../support/pool.js';
import { chaosPool, RECYCLED_AFTER_KILL_MS, sentBetween, statuses, steadyLoad } from './support.js';

/**
 * 2 replicas and 1 pod under steady load; Redis is killed for 10 s,
 * then started again EMPTY on the same port (no persistence). In `reject` mode every request
 * of the outage is answered within 1 s with 503 + Retry-After; in `local_share` mode with
 * 200. After the restart the first 200 comes within 3 s and at least 99% of what follows is
 * 200, with no replica restarted; the leader's epoch keeps rising, so a write fenced by the
 * pre-loss leadership is refused. Ends with the conservation check and nothing in flight.
 */
const OUTAGE_MS = 10_000;
const AFTER_MS = 8_000;

describe.each(['reject', 'local_share'] as const)(
  'Redis restarts empty (on_outage: %s)',
  (mode) => {
    let pool: Pool;

    beforeAll(async () => {
      pool = await startPool(
        chaosPool({
          scheduler: { queue_ttl_ms: 5_000 },
          redis: { on_outage: mode, command_timeout_ms: 250 },
        }),
      );
    }, 60_000);

    afterAll(async () => {
      await pool?.stop();
    });

    it('answers fast during the outage, heals by itself afterwards, and fences the old epoch', async () => {
      const urls = pool.gateways.map((g) => g.url);
      const load = steadyLoad({ urls, concurrency: 8, maxMs: 40_000, requestTimeoutMs: 5_000 });
      try {
        await sleep(3_000);
        const before = await pool.state();
        expect(before.leader).not.toBeNull();
        const preLoss = { replica: before.leader as string, epoch: before.epoch };

        const killedAt = performance.now();
        await pool.redis.kill();
        await sleep(2_000);
        // /readyz and the metrics say which mode each replica is in.
        for (const gateway of pool.gateways) {
          const ready = await fetch(`${gateway.url}/readyz`);
          const body = (await ready.json()) as { scheduler: unknown; redis: string };
          expect([ready.status, body.scheduler, body.redis]).toEqual(
            mode === 'reject' ? [503, false, 'unreachable'] : [200, 'local_share', 'unreachable'],
          );
          expect(await metricValue(gateway.url, 'fairgate_redis_outage', mode)).toBe(1);
        }
        await sleep(OUTAGE_MS - 2_000);
        await pool.redis.restart();
        const restartedAt = performance.now();
        await sleep(AFTER_MS);
        for (const gateway of pool.gateways) {
          expect((await fetch(`${gateway.url}/readyz`)).status).toBe(200);
          expect(await metricValue(gateway.url, 'fairgate_redis_outage', mode)).toBe(0);
          expect(
            await metricValue(gateway.url, 'fairgate_redis_outages_total', mode),
          ).toBeGreaterThanOrEqual(1);
        }
        load.stop();
        const records = await load.done;

        // Requests that ended before the kill all succeeded; one waiting for a grant at the
        // kill gets the mode's answer like those sent during the outage.
        const beforeKill = records.filter((r) => r.endedAt < killedAt);
        expect(statuses(beforeKill)).toEqual({ 200: beforeKill.length });

        // Requests sent during the outage: answered within 1 s, as the mode says.
        const outage = sentBetween(records, killedAt, restartedAt);
        expect(outage.length).toBeGreaterThan(20);
        const slowest = Math.max(...outage.map((r) => r.endMs));
        expect(slowest).toBeLessThan(1_000);
        if (mode === 'reject') {
          const refused = outage.filter((r) => r.sentAt >= killedAt + RECYCLED_AFTER_KILL_MS);
          const other = refused.filter((r) => r.status !== 503 || r.retryAfter === null);
          expect(
            other.length,
            `outage answers other than 503 + Retry-After (from ${RECYCLED_AFTER_KILL_MS} ms after the kill): ${JSON.stringify(statuses(other))} of ${refused.length}; before: ${JSON.stringify(statuses(outage.filter((r) => !refused.includes(r))))}`,
          ).toBe(0);
        } else {
          expect(statuses(outage)).toEqual({ 200: outage.length });
        }

        // After the restart: the first 200 within 3 s, then at least 99% 200.
        const after = sentBetween(records, restartedAt, Number.POSITIVE_INFINITY);
        const firstOk = after.find((r) => r.status === 200);
        expect(firstOk).toBeDefined();
        const recoveryMs = (firstOk?.endedAt ?? Number.POSITIVE_INFINITY) - restartedAt;
        expect(recoveryMs).toBeLessThan(3_000);
        const settled = after.filter((r) => r.sentAt >= (firstOk?.endedAt ?? 0));
        const ok = settled.filter((r) => r.status === 200).length;
        expect(ok / settled.length).toBeGreaterThanOrEqual(0.99);
        console.log(
          `[${mode}] before ${JSON.stringify(statuses(beforeKill))}, outage ${JSON.stringify(statuses(outage))} (slowest ${slowest.toFixed(0)} ms), after ${JSON.stringify(statuses(after))}, first 200 ${recoveryMs.toFixed(0)} ms after the restart`,
        );

        // The epoch survived the loss: a new leadership is above the old one, and a write
        // fenced by the pre-loss leadership is refused.
        await expect
          .poll(async () => (await pool.state()).leader, {
            timeout: 5_000,
            interval: 50,
            message: 'a leader after the restart',
          })
          .not.toBeNull();
        const afterState = await pool.state();
        expect(afterState.epoch).toBeGreaterThan(preLoss.epoch);
        const probe = new RedisScheduler({ pool: afterState.pool, connection: pool.redis.url });
        try {
          expect(await probe.setControl(preLoss, { budget: 1 })).toBe(false);
          expect(await probe.setControl(preLoss, { budget: 1 })).toBe(false);
        } finally {
          await probe.close();
        }
        // One log line each way per outage, and no ioredis "Unhandled error event".
        for (const gateway of pool.gateways) {
          const logs = gateway.logs();
          expect(logs).toMatch(/Redis unreachable \(.*\): outage mode/);
          expect(logs).toMatch(/Redis reachable again after \d+ ms: outage mode over/);
          expect(logs).not.toContain('Unhandled error event');
        }
        await expectConserved(pool);
      } finally {
        load.stop();
        await load.done;
      }
    }, 90_000);
  },
);

/** The sample of metric `name` whose labels include mode="<mode>" on the gateway's /metrics. */
async function metricValue(url: string, name: string, mode: string): Promise<number | undefined> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const line = text
    .split('\n')
    .find((l) => l.startsWith(`${name}{`) && l.includes(`mode="${mode}"`));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
}
