import { type RedisHandle, startRedis } from '@fairgate/testkit';
import { Redis } from 'ioredis';

export interface TestRedis {
  readonly handle: RedisHandle;
  /** True when the server runs in cluster mode owning every slot: scripts then fail on
   * any key outside the declared slot (Redis 7 checks this for `#!lua` scripts). */
  readonly clusterChecked: boolean;
  stop(): Promise<void>;
}

/**
 * A private redis-server in cluster mode as a one-node cluster that owns all 16384 slots.
 * Plain commands work as on a standalone server, but every script call is checked by Redis
 * itself for keys outside the slot of its declared KEYS.
 */
export async function startClusterCheckedRedis(): Promise<TestRedis> {
  if (process.env.REDIS_URL) {
    const handle = await startRedis();
    return { handle, clusterChecked: false, stop: () => handle.stop() };
  }
  const handle = await startRedis({
    args: ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf'],
  });
  const admin = new Redis(handle.url);
  try {
    await admin.call('CLUSTER', 'ADDSLOTSRANGE', '0', '16383');
    const deadline = Date.now() + 20_000;
    while (!String(await admin.call('CLUSTER', 'INFO')).includes('cluster_state:ok')) {
      if (Date.now() > deadline) throw new Error('one-node cluster did not reach cluster_state:ok');
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  } finally {
    admin.disconnect();
  }
  return { handle, clusterChecked: true, stop: () => handle.stop() };
}
