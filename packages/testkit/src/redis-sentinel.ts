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
  const binary = requireRedisServer();
  const [primary, replica, ...sentinelPorts] = (await freePorts(5)) as [
    number,
    number,
    ...number[],
  ];
  const monitor: Monitor = {
    name: options.name ?? 'fairgate',
    primary,
    downAfterMs: options.downAfterMs ?? 1_000,
    failoverTimeoutMs: options.failoverTimeoutMs ?? 3_000,
  };
  const sentinels = sentinelPorts.map((port) => ({ host: LOOPBACK, port }));
  const setup: Setup = {
    binary,
    servers: new Map(),
    processes: [],
    dirs: [],
    paused: new Set(),
  };
  try {
    await startServer(setup, primary, []);
    await startServer(setup, replica, ['--replicaof', LOOPBACK, String(primary)]);
    await waitUntil(
      `replica ${replica} in sync with ${primary}`,
      () =>
        withClient(replica, async (redis) => {
          const info = parseInfo(await redis.info('replication'));
          return info.get('master_link_status') === 'up';
        }),
      { timeoutMs: 15_000, intervalMs: 50 },
    );
    await startSentinels(setup, sentinelPorts, monitor);
    for (const { port } of sentinels) await waitForSentinel(port, monitor.name);
  } catch (error) {
    await stopSetup(setup);
    throw error;
  }
  return sentinelHandle(setup, sentinels, monitor);
}

/** What the sentinels monitor, and how quickly they fail it over. */
interface Monitor {
  name: string;
  /** The first primary's port. */
  primary: number;
  downAfterMs: number;
  failoverTimeoutMs: number;
}

/** The processes and dirs of one setup: stopped and removed together. */
interface Setup {
  binary: string;
  /** The redis-servers (primary and replica) by port. */
  servers: Map<number, ManagedProcess>;
  processes: ManagedProcess[];
  dirs: string[];
  /** Servers SIGSTOPped by pausePrimary, resumed before they are stopped. */
  paused: Set<ManagedProcess>;
}

async function stopSetup(setup: Setup): Promise<void> {
  for (const server of setup.paused) if (!server.exited) process.kill(server.pid, 'SIGCONT');
  setup.paused.clear();
  await stopAndClean(setup.processes, setup.dirs);
}

async function startServer(setup: Setup, port: number, extra: string[]): Promise<void> {
  const dir = tempDir('redis-sentinel-data');
  setup.dirs.push(dir);
  // A full sync starts at once, not after the default 5 s wait for more replicas.
  const args = [...serverArgs(port, dir), '--repl-diskless-sync-delay', '0', ...extra];
  const server = await spawnRedisProcess('redis-server', setup.binary, args, port);
  setup.processes.push(server);
  setup.servers.set(port, server);
}

/** One sentinel per port, each with its own dir and config; throws if any fails to start. */
async function startSentinels(setup: Setup, ports: number[], monitor: Monitor): Promise<void> {
  const sentinelCommand = sentinelLauncher(setup.binary);
  const started = await Promise.allSettled(
    ports.map((port) => {
      const dir = tempDir('redis-sentinel');
      setup.dirs.push(dir);
      // Sentinel rewrites its config file (discovered replicas, sentinels, epochs).
      const config = join(dir, 'sentinel.conf');
      writeFileSync(config, sentinelConfig(port, dir, monitor));
      return spawnRedisProcess(
        'redis-sentinel',
        sentinelCommand.command,
        sentinelCommand.args(config),
        port,
      );
    }),
  );
  for (const result of started) {
    if (result.status === 'fulfilled') setup.processes.push(result.value);
  }
  const failed = started.find((r) => r.status === 'rejected');
  if (failed) throw failed.reason;
}

function sentinelConfig(port: number, dir: string, monitor: Monitor): string {
  const { name } = monitor;
  return [
    `port ${port}`,
    `bind ${LOOPBACK}`,
    `dir ${dir}`,
    'daemonize no',
    'loglevel warning',
    `sentinel monitor ${name} ${LOOPBACK} ${monitor.primary} 2`,
    `sentinel down-after-milliseconds ${name} ${monitor.downAfterMs}`,
    `sentinel failover-timeout ${name} ${monitor.failoverTimeoutMs}`,
    `sentinel parallel-syncs ${name} 1`,
    '',
  ].join('\n');
}

/** Waits until the sentinel at `port` sees the primary, its replica and 2 other sentinels. */
function waitForSentinel(port: number, name: string): Promise<void> {
  return waitUntil(
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

function sentinelHandle(
  setup: Setup,
  sentinels: HostPort[],
  monitor: Monitor,
): RedisSentinelHandle {
  const { name } = monitor;
  let current = monitor.primary;
  return {
    name,
    sentinels,
    downAfterMs: monitor.downAfterMs,
    primaryPort: () => current,
    async killPrimary() {
      await setup.servers.get(current)?.kill();
    },
    async pausePrimary() {
      const server = setup.servers.get(current);
      if (!server || server.exited) return;
      process.kill(server.pid, 'SIGSTOP');
      setup.paused.add(server);
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
    stop: () => stopSetup(setup),
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
