import type { FairgateConfig } from '@fairgate/config';
import { createRedisConnection } from '@fairgate/scheduler';
import type { EdgeMetrics } from '@fairgate/telemetry';
import type { Tracer } from '@opentelemetry/api';
import type { Pools } from '../pools.js';
import { redisTopology } from '../scheduler-setup.js';
import { BatchService } from './batch-service.js';
import type { FileStore } from './file-store.js';
import { RedisFileStore } from './redis-file-store.js';

/** The Batch API of a replica with `redis:`: its file store and its batch service. */
export interface BatchApi {
  readonly files: FileStore;
  readonly batches: BatchService;
  close(): Promise<void>;
}

/**
 * Longest one file or batch call may take. Files are up to `batch.max_file_bytes` (50 MiB
 * by default) in one reply, so far above the scheduler's per-command bound.
 */
const STORE_COMMAND_TIMEOUT_MS = 30_000;

export function startBatchApi(options: {
  config: () => FairgateConfig;
  pools: Pools;
  metrics: EdgeMetrics;
  tracer: Tracer;
  log: (line: string) => void;
}): BatchApi {
  const { redis } = options.config();
  if (!redis) throw new Error('the Batch API needs redis:');
  const connection = createRedisConnection({
    topology: redisTopology(redis),
    commandTimeoutMs: STORE_COMMAND_TIMEOUT_MS,
  });
  const files = new RedisFileStore(connection);
  const batches = new BatchService({ ...options, redis: connection, files });
  return {
    files,
    batches,
    async close() {
      await batches.close();
      connection.disconnect();
    },
  };
}
