import { Cluster, Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { pingRedis, startRedisCluster, startRedisSentinel } from '../src/index.js';

describe('startRedisCluster', () => {
  it('joins 3 masters that route keys by slot, and stop() ends them all', async () => {
    const cluster = await startRedisCluster();
    try {
      expect(cluster.nodes).toHaveLength(3);
      const client = new Cluster(cluster.nodes);
      client.on('error', () => {});
      try {
        // {a} and {b} hash to different slots; each lands on the master masterForKey names.
        for (const key of ['{a}x', '{b}x', 'plain']) {
          await client.set(key, key);
          const owner = await cluster.masterForKey(key);
          const direct = new Redis(owner, '127.0.0.1');
          expect(await direct.get(key)).toBe(key);
          direct.disconnect();
        }
      } finally {
        client.disconnect();
      }
    } finally {
      await cluster.stop();
    }
    for (const { port } of cluster.nodes) expect(await pingRedis(port)).toBe(false);
  });
});

describe('startRedisSentinel', () => {
  it('serves the primary through the sentinels, and stop() ends every process', async () => {
    const setup = await startRedisSentinel();
    try {
      expect(setup.sentinels).toHaveLength(3);
      const client = new Redis({ sentinels: setup.sentinels, name: setup.name });
      client.on('error', () => {});
      try {
        await client.set('k', 'v');
        expect(await client.config('GET', 'port')).toEqual(['port', String(setup.primaryPort())]);
        expect(await client.get('k')).toBe('v');
      } finally {
        client.disconnect();
      }
    } finally {
      await setup.stop();
    }
    for (const { port } of [...setup.sentinels, { port: setup.primaryPort() }]) {
      expect(await pingRedis(port)).toBe(false);
    }
  });
});
