import { dirname } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { findExecutable } from './paths.js';
import { type ManagedProcess, spawnManaged, waitUntil } from './processes.js';
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

export interface RedisClusterOptions {
  /** Masters, each owning an equal share of the 16384 slots (at least 3; default 3). */
  masters?: number;
}

export interface RedisClusterHandle {
  /** The masters, in slot order (the first owns slot 0). */
  readonly nodes: HostPort[];
  /** Port of the master that owns `key`'s slot (CLUSTER KEYSLOT, then CLUSTER SLOTS). */
  masterForKey(key: string): Promise<number>;
  /** Stops every node and removes their dirs. */
  stop(): Promise<void>;
}

/**
 * A private Redis Cluster of `masters` redis-server processes and no replicas, joined with
 * `redis-cli --cluster create`; resolves once every node reports cluster_state:ok.
 *
 * Each node's bus port is chosen free too (`--cluster-port`, Redis 7) instead of the default
 * port + 10000, which overflows for ephemeral ports above 55535.
 */
export async function startRedisCluster(
  options: RedisClusterOptions = {},
): Promise<RedisClusterHandle> {
  const masters = options.masters ?? 3;
  if (!Number.isInteger(masters) || masters < 3) {
    throw new Error(`a Redis Cluster needs at least 3 masters, got ${masters}`);
  }
  const binary = requireRedisServer();
  const cli = findRedisCli(binary);
  const ports = await freePorts(masters * 2);
  const nodes = ports.slice(0, masters).map((port) => ({ host: LOOPBACK, port }));
  const dirs: string[] = [];
  const processes: ManagedProcess[] = [];
  const stop = () => stopAndClean(processes, dirs);
  try {
    const started = nodes.map(({ port }, i) => {
      const dir = tempDir('redis-cluster');
      dirs.push(dir);
      // biome-ignore format: flag/value pairs read best side by side
      const args = [
        ...serverArgs(port, dir),
        '--cluster-enabled', 'yes',
        '--cluster-config-file', 'nodes.conf',
        '--cluster-port', String(ports[masters + i]),
      ];
      return spawnRedisProcess('redis-cluster-node', binary, args, port);
    });
    const results = await Promise.allSettled(started);
    for (const result of results) if (result.status === 'fulfilled') processes.push(result.value);
    const failed = results.find((r) => r.status === 'rejected');
    if (failed) throw failed.reason;

    await runCli(cli, [
      '--cluster',
      'create',
      ...nodes.map((n) => `${n.host}:${n.port}`),
      '--cluster-replicas',
      '0',
      '--cluster-yes',
    ]);
    for (const { port } of nodes) {
      await waitUntil(
        `cluster_state:ok on node ${port}`,
        () =>
          withClient(port, async (redis) => {
            const info = parseInfo(String(await redis.call('CLUSTER', 'INFO')));
            return (
              info.get('cluster_state') === 'ok' && info.get('cluster_known_nodes') === `${masters}`
            );
          }),
        { timeoutMs: 20_000, intervalMs: 50 },
      );
    }
  } catch (error) {
    await stop();
    throw error;
  }

  const first = nodes[0] as HostPort;
  return {
    nodes,
    stop,
    masterForKey: (key) =>
      withClient(first.port, async (redis) => {
        const slot = Number(await redis.call('CLUSTER', 'KEYSLOT', key));
        const ranges = (await redis.call('CLUSTER', 'SLOTS')) as [
          number,
          number,
          [string, number],
        ][];
        const owner = ranges.find(([from, to]) => slot >= from && slot <= to);
        if (!owner) throw new Error(`no master owns slot ${slot} (key ${key})`);
        return Number(owner[2][1]);
      }),
  };
}

/** redis-cli next to redis-server (same package), else the one on the PATH. */
function findRedisCli(serverBinary: string): string {
  const cli = findExecutable('redis-cli', [dirname(serverBinary)]);
  if (!cli)
    throw new Error('redis-cli not found (it ships with redis-server, e.g. Debian redis-tools)');
  return cli;
}

/** Runs redis-cli to completion (bounded: 30 s), failing with its output on a non-zero exit. */
async function runCli(cli: string, args: string[]): Promise<void> {
  const run = spawnManaged({ name: 'redis-cli', command: cli, args });
  const exit = await Promise.race([run.exit, sleep(30_000).then(() => undefined)]);
  if (!exit) await run.kill();
  if (exit?.code !== 0) {
    throw new Error(
      `redis-cli ${args.join(' ')} failed (${exit ? (exit.code ?? exit.signal) : 'timeout'}):\n${run.logs()}`,
    );
  }
}
