import { type RedisHandle, startRedis } from '@fairgate/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redisCommandStats } from '../bench/proc.js';
import { measureWarmRelease } from '../bench/warm-release.js';

describe("warm release (bench:waiting's baseline for Redis's time in a release)", () => {
  let redis: RedisHandle;
  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    await redis?.stop();
  });

  it('reads commandstats as calls and Redis µs per command', async () => {
    const client = new Redis(redis.url);
    try {
      await client.set('fairgate:test:stat', '1');
      const set = (await redisCommandStats(redis.url)).get('set');
      expect(set?.calls).toBeGreaterThanOrEqual(1);
      expect(set?.usec).toBeGreaterThanOrEqual(0);
    } finally {
      client.disconnect();
    }
  });

  it('times releases that each grant the next waiting request, then deletes its pool', async () => {
    const client = new Redis(redis.url);
    try {
      const before = (await redisCommandStats(redis.url)).get('fcall')?.calls ?? 0;
      const warm = await measureWarmRelease(redis.url, { waiting: 60, releases: 40 });
      expect(warm.releases).toBe(40);
      expect(warm.fcallMicros).toBeGreaterThan(0);
      // A release with its pass is tens of µs on a 2-core VM; the bound only catches a unit slip.
      expect(warm.fcallMicros).toBeLessThan(50_000);
      // Setup (configure, tenants, pods, 62 enqueues) and the 40 releases, each one FCALL.
      const fcalls = ((await redisCommandStats(redis.url)).get('fcall')?.calls ?? 0) - before;
      expect(fcalls).toBeGreaterThanOrEqual(62 + 40);
      // The pool's keys are gone.
      expect(await client.keys('{fg:bench-warm-release}:*')).toEqual([]);
    } finally {
      client.disconnect();
    }
  });
});
