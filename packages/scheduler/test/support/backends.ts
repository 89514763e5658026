import { Cluster, Redis } from 'ioredis';
import {
  LocalScheduler,
  poolKeys,
  RedisScheduler,
  type Scheduler,
  type SchedulerSettingsInput,
} from '../../src/index.js';
import { PER_REQUEST_INDEXES, PER_REQUEST_PREFIXES } from '../../src/keys.js';
import type { LocalEngine } from '../../src/local/engine.js';

/** One isolated pool of one implementation, with as many replica handles as a test wants. */
export interface PoolBackend {
  /** A scheduler handle for `replica`: its own connection on Redis, the shared one locally. */
  connect(replica: string): Scheduler;
  /** Descriptions of per-request state still present (empty when nothing leaked). */
  perRequestResidue(): Promise<string[]>;
  close(): Promise<void>;
}

export interface Backend {
  readonly kind: 'local' | 'redis';
  newPool(): PoolBackend;
}

/**
 * The settings the conformance suite (test/conformance) was written against where they
 * differ from the settings table's defaults (the gateway's: budget 64, lease 30 s, band
 * capacity 5,000). Every pool of these backends configures with them underneath what a
 * test gives, so a test that leaves one unset runs as it was written.
 */
export const SUITE_DEFAULTS: SchedulerSettingsInput = {
  initialBudget: 32,
  leaseTtlMs: 10_000,
  bandCapacity: 1_000,
};

/** `scheduler`, its configure() filling SUITE_DEFAULTS under the given settings. */
function withSuiteDefaults<S extends Scheduler>(scheduler: S): S {
  const configure = scheduler.configure.bind(scheduler);
  scheduler.configure = (input = {}, options) =>
    configure({ ...SUITE_DEFAULTS, ...input }, options);
  return scheduler;
}

export function localBackend(): Backend {
  return {
    kind: 'local',
    newPool() {
      const scheduler = withSuiteDefaults(new LocalScheduler());
      return {
        connect: () => scheduler,
        async perRequestResidue() {
          const live = scheduler.liveRequestCount;
          const residue = live === 0 ? [] : [`${live} live request records`];
          const engine = (scheduler as unknown as { engine: LocalEngine }).engine;
          const indexes = {
            leases: engine.leases.size,
            queueDeadlines: engine.queueDeadlines.size,
            evictable: engine.evictable.size,
            sheddable: engine.sheddable.size,
            sheddableByTenant: engine.sheddableByTenant.size,
            waitingByReplica: engine.waitingByReplica.size,
            queues: engine.queues.size,
          };
          for (const [name, size] of Object.entries(indexes)) {
            if (size > 0) residue.push(`${name} holds ${size}`);
          }
          return residue;
        },
        close: () => scheduler.close(),
      };
    },
  };
}

let poolCounter = 0;

/**
 * Pools on one Redis: a redis:// URL (each replica handle opens and closes a connection of
 * its own) or a Cluster connection all handles share (left open: the test owns it; the
 * pools' hash tags spread over its masters).
 */
export function redisBackend(target: () => string | Cluster): Backend {
  return {
    kind: 'redis',
    newPool() {
      poolCounter += 1;
      const pool = `t${poolCounter}-${process.pid}`;
      const keys = poolKeys(pool);
      const connection = target();
      const handles = new Map<string, RedisScheduler>();
      return {
        connect(replica) {
          let handle = handles.get(replica);
          if (!handle) {
            handle = withSuiteDefaults(new RedisScheduler({ pool, connection }));
            handles.set(replica, handle);
          }
          return handle;
        },
        async perRequestResidue() {
          const admin = typeof connection === 'string' ? new Redis(connection) : connection;
          // A pool's keys all live on one master, but SCAN is per server: scan every master.
          const servers = admin instanceof Cluster ? admin.nodes('master') : [admin];
          try {
            const residue: string[] = [];
            const found = await Promise.all(servers.map((s) => scanAll(s, `${keys.tag}*`)));
            for (const key of found.flat()) {
              if (PER_REQUEST_PREFIXES.some((name) => key.startsWith(keys[name]))) {
                residue.push(key);
              }
            }
            for (const zset of PER_REQUEST_INDEXES.map((name) => keys[name])) {
              const size = await admin.zcard(zset);
              if (size > 0) residue.push(`${zset} holds ${size}`);
            }
            return residue;
          } finally {
            if (admin !== connection) admin.disconnect();
          }
        },
        async close() {
          await Promise.all([...handles.values()].map((handle) => handle.close()));
        },
      };
    },
  };
}

export async function scanAll(redis: Redis, match: string): Promise<string[]> {
  const keys: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await redis.scan(cursor, 'MATCH', match, 'COUNT', 1000);
    keys.push(...batch);
    cursor = next;
  } while (cursor !== '0');
  return keys;
}
