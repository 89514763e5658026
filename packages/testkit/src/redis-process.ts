import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { freePort } from './ports.js';
import { type ManagedProcess, spawnManaged, waitUntil } from './processes.js';
import { findRedisServer, pingRedis, REDIS_MISSING_HELP } from './redis.js';

/**
 * Shared pieces of the multi-process Redis harnesses (cluster, sentinel): every server runs
 * from the real `redis-server` binary (never REDIS_URL or a container: these topologies need
 * processes the test can kill), on free loopback ports, in a temp dir of its own.
 */

export interface HostPort {
  host: string;
  port: number;
}

export const LOOPBACK = '127.0.0.1';

export function requireRedisServer(): string {
  const binary = findRedisServer();
  if (!binary) throw new Error(REDIS_MISSING_HELP);
  return binary;
}

/** `count` distinct free ports (freePort alone may hand out one port twice in a row). */
export async function freePorts(count: number): Promise<number[]> {
  const ports = new Set<number>();
  for (let attempt = 0; ports.size < count && attempt < count * 10; attempt += 1) {
    ports.add(await freePort());
  }
  if (ports.size < count) throw new Error(`could not find ${count} distinct free ports`);
  return [...ports];
}

export function tempDir(prefix: string): string {
  return mkdtempSync(join(tmpdir(), `fairgate-${prefix}-`));
}

export function removeDirs(dirs: readonly string[]): void {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
}

/** Arguments every private server gets: loopback only, no persistence, quiet, in `dir`. */
export function serverArgs(port: number, dir: string): string[] {
  // biome-ignore format: flag/value pairs read best side by side
  return [
    '--port', String(port),
    '--bind', LOOPBACK,
    '--save', '',
    '--appendonly', 'no',
    '--dir', dir,
    '--daemonize', 'no',
    '--loglevel', 'warning',
  ];
}

/** Spawns `command args` and resolves once `port` answers PING (fails with its logs if not). */
export async function spawnRedisProcess(
  name: string,
  command: string,
  args: string[],
  port: number,
): Promise<ManagedProcess> {
  const server = spawnManaged({ name: `${name}:${port}`, command, args });
  try {
    await waitUntil(`${name} on port ${port}`, () => pingRedis(port), { process: server });
  } catch (error) {
    await server.kill();
    throw error;
  }
  return server;
}

/**
 * One short-lived admin connection to `port`: no reconnects, no retries, so a probe against
 * a dead or not-yet-started server fails at once instead of hanging.
 */
export async function withClient<T>(port: number, use: (redis: Redis) => Promise<T>): Promise<T> {
  const redis = new Redis({
    host: LOOPBACK,
    port,
    lazyConnect: true,
    retryStrategy: () => null,
    maxRetriesPerRequest: 0,
    connectTimeout: 1_000,
    commandTimeout: 2_000,
  });
  redis.on('error', () => {});
  try {
    await redis.connect();
    return await use(redis);
  } finally {
    redis.disconnect();
  }
}

/** `field:value` lines of an INFO reply as a map. */
export function parseInfo(info: string): Map<string, string> {
  const fields = new Map<string, string>();
  for (const line of info.split('\r\n')) {
    const colon = line.indexOf(':');
    if (colon > 0 && !line.startsWith('#')) fields.set(line.slice(0, colon), line.slice(colon + 1));
  }
  return fields;
}

/** Stops every process (SIGTERM, then SIGKILL), then removes the dirs; never throws. */
export async function stopAndClean(
  processes: readonly ManagedProcess[],
  dirs: readonly string[],
): Promise<void> {
  await Promise.allSettled(processes.map((p) => p.stop(3_000)));
  removeDirs(dirs);
}
