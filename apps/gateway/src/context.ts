import type { FairgateConfig } from '@fairgate/config';
import type { EdgeMetrics } from '@fairgate/telemetry';
import type { Tracer } from '@opentelemetry/api';
import type { BatchService } from './batch/batch-service.js';
import type { FileStore } from './batch/file-store.js';
import type { Drain } from './drain.js';
import type { Pools } from './pools.js';
import type { JwtVerifier } from './tenancy/jwt.js';
import type { Tenancy } from './tenancy/tenancy.js';
import type { TenantDirectory } from './tenants.js';

/** Everything a request handler needs; built once per gateway process. */
export interface GatewayDeps {
  replica: string;
  /** The config in force (changes on hot reload); each pool reads its view of it. */
  config: () => FairgateConfig;
  tenants: () => TenantDirectory;
  /**
   * The pools: each its scheduler, grant broker, pods and control plane (pool-runtime.ts);
   * a request's model picks its pool.
   */
  pools: Pools;
  tracer: Tracer;
  /** The replica's own metrics (its HTTP edge); each pool has its own (PoolRuntime.metrics). */
  metrics: EdgeMetrics;
  /** 'redis' (shared, any number of replicas) or 'embedded' (LocalScheduler, one replica). */
  mode: 'redis' | 'embedded';
  /** Graceful shutdown: whether the replica drains, and its requests in progress. */
  drain: Drain;
  /** The replica's log (GatewayOptions.log): one line per call. */
  log: (line: string) => void;
  /**
   * The Batch API's files (routes/files.ts) and batches (routes/batches.ts); undefined on
   * the embedded scheduler (no Redis): those endpoints answer 501 batch_unavailable.
   */
  files: FileStore | undefined;
  batches: BatchService | undefined;
  /**
   * Tenants and keys made at run time (the admin API, routes/tenants.ts); undefined on the
   * embedded scheduler (no Redis): those routes answer 501.
   */
  tenancy: Tenancy | undefined;
  /** JWT bearer tokens beside API keys (config `auth.jwt`, tenancy/jwt.ts); absent = API keys only. */
  jwt?: JwtVerifier;
}

/** Per-request values set by middleware (Hono context variables). */
export interface RequestState {
  requestId: string;
  /** performance.now() at arrival (t1). */
  t1: number;
  /**
   * OpenAI's x-ratelimit-* headers of a tenant with a budget or a rate, from its enqueue:
   * sent with the answer, whatever it is (rate-limit-headers.ts).
   */
  rateLimitHeaders?: Record<string, string>;
}

declare module 'hono' {
  interface ContextVariableMap {
    request: RequestState;
  }
}

/** Output tokens assumed for KV sizing when a chat request names no max_tokens. */
export const DEFAULT_MAX_TOKENS = 256;
