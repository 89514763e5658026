import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { findExecutable } from './paths.js';
import { type ManagedProcess, waitUntil } from './processes.js';
import {
  freePorts,
  type HostPort,
  LOOPBACK,
  parseInfo,
  requireRedisServer,
  serverArgs,
  spawnRedisProcess,
  stopAndClean,
  tempDir,
  withClient,
} from './redis-process.js';

export interface RedisSentinelOptions {
  /** The monitored primary's name (default 'fairgate'). */
  name?: string;
  /** Sentinel down-after-milliseconds: how long the primary may be silent (default 1000). */
  downAfterMs?: number;
  /** Sentinel failover-timeout (default 3000). */
  failoverTimeoutMs?: number;
}

export interface RedisSentinelHandle {
  readonly name: string;
  /** The three sentinels (quorum 2). */
  readonly sentinels: HostPort[];
  readonly downAfterMs: number;
  /** The primary as the harness last knew it: the first one, then what waitForFailover saw. */
  primaryPort(): number;
  /** SIGKILL the current primary (no shutdown, no last sync to the replica). */
  killPrimary(): Promise<void>;
  /**
   * SIGSTOP the current primary: a stall or a partition, its connections stay open. It stays
   * stopped until stop(), which resumes it first.
   */
  pausePrimary(): Promise<void>;
  /**
   * Waits (bounded by `timeoutMs`, default 15 s) until the sentinels name a primary other
   * than the one last known and that server answers as a master; returns its port.
   */
  waitForFailover(timeoutMs?: number): Promise<number>;
  /** Stops every process and removes their dirs. */
  stop(): Promise<void>;
}

/**
 * A private Sentinel setup: one primary, one replica (`--replicaof`) and three sentinels
 * (`sentinel monitor <name> 127.0.0.1 <primary> 2`). Resolves once the replica is in sync
 * and every sentinel sees the primary, the replica and the two other sentinels, so a
 * failover can start as soon as the primary is down for `downAfterMs`.
 *
 * Sentinels are started only after the replica is in sync: a sentinel learns of replicas
 * from the primary's INFO, which it reads at once on connect and then only every 10 s.
 */
export async function startRedisSentinel(
  options: RedisSentinelOptions = {},
): Promise<RedisSentinelHandle> {
  const name = options.name ?? 'fairgate';
  const downAfterMs = options.downAfterMs ?? 1_000;
  const failoverTimeoutMs = options.failoverTimeoutMs ?? 3_000;
  const binary = requireRedisServer();
  const [primary, replica, ...sentinelPorts] = (await freePorts(5)) as [
    number,
    number,
    ...number[],
  ];
  const sentinels = sentinelPorts.map((port) => ({ host: LOOPBACK, port }));
  const servers = new Map<number, ManagedProcess>();
  const processes: ManagedProcess[] = [];
  const dirs: string[] = [];
  const paused = new Set<ManagedProcess>();
  const stop = async () => {
    for (const server of paused) if (!server.exited) process.kill(server.pid, 'SIGCONT');
    paused.clear();
    await stopAndClean(processes, dirs);
  };

  const startServer = async (port: number, extra: string[]) => {
    const dir = tempDir('redis-sentinel-data');
    dirs.push(dir);
    // A full sync starts at once, not after the default 5 s wait for more replicas.
    const args = [...serverArgs(port, dir), '--repl-diskless-sync-delay', '0', ...extra];
    const server = await spawnRedisProcess('redis-server', binary, args, port);
    processes.push(server);
    servers.set(port, server);
  };

  try {
    await startServer(primary, []);
    await startServer(replica, ['--replicaof', LOOPBACK, String(primary)]);
    await waitUntil(
      `replica ${replica} in sync with ${primary}`,
      () =>
        withClient(replica, async (redis) => {
          const info = parseInfo(await redis.info('replication'));
          return info.get('master_link_status') === 'up';
        }),
      { timeoutMs: 15_000, intervalMs: 50 },
    );

    const sentinelCommand = sentinelLauncher(binary);
    const started = await Promise.allSettled(
      sentinelPorts.map((port) => {
        const dir = tempDir('redis-sentinel');
        dirs.push(dir);
        // Sentinel rewrites its config file (discovered replicas, sentinels, epochs).
        const config = join(dir, 'sentinel.conf');
        writeFileSync(
          config,
          [
            `port ${port}`,
            `bind ${LOOPBACK}`,
            `dir ${dir}`,
            'daemonize no',
            'loglevel warning',
            `sentinel monitor ${name} ${LOOPBACK} ${primary} 2`,
            `sentinel down-after-milliseconds ${name} ${downAfterMs}`,
            `sentinel failover-timeout ${name} ${failoverTimeoutMs}`,
            `sentinel parallel-syncs ${name} 1`,
            '',
          ].join('\n'),
        );
        return spawnRedisProcess(
          'redis-sentinel',
          sentinelCommand.command,
          sentinelCommand.args(config),
          port,
        );
      }),
    );
    for (const result of started) if (result.status === 'fulfilled') processes.push(result.value);
    const failed = started.find((r) => r.status === 'rejected');
    if (failed) throw failed.reason;

    for (const { port } of sentinels) {
      await waitUntil(
        `sentinel ${port} sees ${name}, its replica and 2 other sentinels`,
        () =>
          withClient(port, async (redis) => {
            const fields = flatToMap((await redis.call('SENTINEL', 'MASTER', name)) as string[]);
            return (
              fields.get('flags') === 'master' &&
              fields.get('num-slaves') === '1' &&
              fields.get('num-other-sentinels') === '2'
            );
          }),
        { timeoutMs: 20_000, intervalMs: 100 },
      );
    }
  } catch (error) {
    await stop();
    throw error;
  }

  let current = primary;
  return {
    name,
    sentinels,
    downAfterMs,
    primaryPort: () => current,
    async killPrimary() {
      await servers.get(current)?.kill();
    },
    async pausePrimary() {
      const server = servers.get(current);
      if (!server || server.exited) return;
      process.kill(server.pid, 'SIGSTOP');
      paused.add(server);
    },
    async waitForFailover(timeoutMs = 15_000) {
      const old = current;
      const deadline = Date.now() + timeoutMs;
      while (Date.now() < deadline) {
        const promoted = await promotedPrimary(sentinels, name, old);
        if (promoted !== undefined) {
          current = promoted;
          return promoted;
        }
        await sleep(50);
      }
      throw new Error(`no failover away from ${old} within ${timeoutMs} ms`);
    },
    stop,
  };
}

/** `redis-sentinel <conf>` where installed, else the same binary as `redis-server <conf> --sentinel`. */
function sentinelLauncher(serverBinary: string) {
  const sentinel = findExecutable('redis-sentinel');
  return sentinel
    ? { command: sentinel, args: (config: string) => [config] }
    : { command: serverBinary, args: (config: string) => [config, '--sentinel'] };
}

/** The port a sentinel names as primary when it is not `old` and answers ROLE as master. */
async function promotedPrimary(
  sentinels: readonly HostPort[],
  name: string,
  old: number,
): Promise<number | undefined> {
  for (const { port } of sentinels) {
    try {
      const address = await withClient(port, (redis) =>
        redis.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name),
      );
      const candidate = Number((address as [string, string] | null)?.[1]);
      if (!candidate || candidate === old) continue;
      const role = await withClient(candidate, (redis) => redis.call('ROLE'));
      if ((role as [string])[0] === 'master') return candidate;
    } catch {
      // a sentinel or the candidate not answering yet: ask the next one
    }
  }
  return undefined;
}

function flatToMap(flat: readonly string[]): Map<string, string> {
  const map = new Map<string, string>();
  for (let i = 0; i + 1 < flat.length; i += 2) map.set(flat[i] as string, flat[i + 1] as string);
  return map;
}
