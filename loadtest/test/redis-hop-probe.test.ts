import { type RedisHandle, startRedis } from '@fairgate/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedisHopProbe } from '../bench/redis-hop-probe.js';

describe('redis hop probe (bench:waiting floor)', () => {
  let redis: RedisHandle;
  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    await redis?.stop();
  });

  it('times round trips and hops through a real redis-server from `record` on, then stops and leaves no key', async () => {
    const probe = await startRedisHopProbe(redis.url, 2);
    await new Promise((resolve) => setTimeout(resolve, 200));
    probe.record();
    await new Promise((resolve) => setTimeout(resolve, 300));
    const { roundTrips, hops } = await probe.stop();
    // ~150 writes in 300 ms at one per 2 ms, the two kinds in turn: ~75 of each (a write in
    // flight at `record` may count on either side); timers on a busy CI machine fire late.
    for (const readings of [roundTrips, hops]) {
      expect(readings.length).toBeGreaterThan(10);
      expect(readings.length).toBeLessThan(120);
      for (const ms of readings) {
        expect(ms).toBeGreaterThan(0);
        expect(ms).toBeLessThan(5_000);
      }
    }
    expect(Math.abs(roundTrips.length - hops.length)).toBeLessThanOrEqual(3);
    const client = new Redis(redis.url);
    try {
      expect(await client.keys('fairgate:bench:hop-probe:*')).toEqual([]);
    } finally {
      client.disconnect();
    }
  });
});
