import { afterAll, describe, expect, it } from 'vitest';
import {
  freePort,
  pingRedis,
  type RedisHandle,
  spawnManaged,
  startRedis,
  toFlags,
  waitUntil,
} from '../src/index.js';

describe('freePort', () => {
  it('returns distinct usable ports', async () => {
    const ports = await Promise.all([freePort(), freePort(), freePort()]);
    for (const port of ports) expect(port).toBeGreaterThan(0);
  });
});

describe('toFlags', () => {
  it.each([
    [{ 'alpha-ms': 20 }, ['--alpha-ms', '20']],
    [{ verbose: true, quiet: false }, ['--verbose']],
    [{ seed: 0, model: 'm' }, ['--seed', '0', '--model', 'm']],
    [{ skipped: undefined }, []],
  ])('%j -> %j', (values, flags) => {
    expect(toFlags(values)).toEqual(flags);
  });
});

describe('spawnManaged', () => {
  it('stop() ends a process that ignores nothing, kill() one that ignores SIGTERM', async () => {
    const polite = spawnManaged({ name: 'sleep', command: 'sleep', args: ['30'] });
    await polite.stop();
    expect(polite.exited).toBe(true);

    const stubborn = spawnManaged({
      name: 'stubborn',
      command: process.execPath,
      args: [
        '-e',
        "process.on('SIGTERM', () => {}); console.log('ignoring'); setInterval(() => {}, 1000)",
      ],
    });
    // Until the handler is installed (a loaded machine starts node slowly), SIGTERM kills it.
    await waitUntil('the SIGTERM handler', async () => stubborn.logs().includes('ignoring'));
    await stubborn.stop(300);
    const { signal } = await stubborn.exit;
    expect(signal).toBe('SIGKILL');
  });

  it('keeps the tail of the output for failure messages', async () => {
    const echo = spawnManaged({
      name: 'echo',
      command: 'sh',
      args: ['-c', 'echo hello; echo oops >&2'],
    });
    await echo.exit;
    expect(echo.logs()).toContain('hello');
    expect(echo.logs()).toContain('oops');
  });
});

describe('startRedis', () => {
  let redis: RedisHandle | undefined;
  afterAll(async () => {
    await redis?.stop();
  });

  it('starts a private server that can be killed and restarted on the same port', async () => {
    redis = await startRedis();
    expect(await pingRedis(redis.port)).toBe(true);
    if (redis.source !== 'redis-server') return; // REDIS_URL/containers cannot be killed here
    await redis.kill();
    expect(await pingRedis(redis.port)).toBe(false);
    await redis.restart();
    expect(await pingRedis(redis.port)).toBe(true);
  });
});
