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

  it('times hops through a real redis-server from `record` on, then stops and leaves no key', async () => {
    const probe = await startRedisHopProbe(redis.url, 2);
    await new Promise((resolve) => setTimeout(resolve, 200));
    probe.record();
    await new Promise((resolve) => setTimeout(resolve, 300));
    const hops = await probe.stop();
    // ~150 hops in 300 ms at one per 2 ms; timers on a busy CI machine fire late.
    expect(hops.length).toBeGreaterThan(20);
    expect(hops.length).toBeLessThan(200);
    for (const hop of hops) {
      expect(hop).toBeGreaterThan(0);
      expect(hop).toBeLessThan(5_000);
    }
    const client = new Redis(redis.url);
    try {
      expect(await client.keys('fairgate:bench:hop-probe:*')).toEqual([]);
    } finally {
      client.disconnect();
    }
  });
});
