import type { Redis } from 'ioredis';
import { createRedisConnection } from '../../src/index.js';

/**
 * A connection to one standalone server as the gateway makes it (createRedisConnection: the
 * reply bound, and a busy turn's writes held until the check phase unless urgent).
 */
export function gatewayConnection(url: string, commandTimeoutMs: number): Redis {
  return createRedisConnection({
    topology: { kind: 'standalone', url },
    commandTimeoutMs,
  }) as Redis;
}
