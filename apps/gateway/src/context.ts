import type { FairgateConfig } from '@fairgate/config';
import type { Scheduler } from '@fairgate/scheduler';
import type { GatewayMetrics } from '@fairgate/telemetry';
import type { Tracer } from '@opentelemetry/api';
import type { ControlPlane } from './control/control-plane.js';
import type { Drain } from './drain.js';
import type { GrantBroker } from './grants.js';
import type { LocalShareInfo } from './local-share.js';
import type { TenantDirectory } from './tenants.js';
import type { PodPool } from './upstream/pods.js';

/** Everything a request handler needs; built once per gateway process. */
export interface GatewayDeps {
  replica: string;
  /** The config in force (changes on hot reload). */
  config: () => FairgateConfig;
  tenants: () => TenantDirectory;
  scheduler: Scheduler;
  broker: GrantBroker;
  pods: PodPool;
  tracer: Tracer;
  metrics: GatewayMetrics;
  /** 'redis' (shared, any number of replicas) or 'embedded' (LocalScheduler, one replica). */
  mode: 'redis' | 'embedded';
  /** TTFT window recorder, leader election and the controller (leader duties). */
  control: ControlPlane;
  /** Redis outage handling (absent on the embedded scheduler). */
  outage?: OutageState;
  /** Graceful shutdown: whether the replica drains, and its requests in progress. */
  drain: Drain;
  /** The replica's log (GatewayOptions.log): one line per call. */
  log: (line: string) => void;
}

/** Where a request is admitted and released: the shared scheduler, or the local share. */
export interface Lane {
  scheduler: Scheduler;
  broker: GrantBroker;
}

/** What the request path and /readyz need to know of a Redis outage. */
export interface OutageState {
  /** True while this replica cannot reach Redis. */
  readonly down: boolean;
  readonly mode: 'reject' | 'local_share';
  /** The local share's lane during an outage in local_share mode, else undefined. */
  localShare(): Lane | undefined;
  /** Its budget, the view it came from and what it holds (for /readyz). */
  localShareInfo(): LocalShareInfo | undefined;
}

/** Per-request values set by middleware (Hono context variables). */
export interface RequestState {
  requestId: string;
  /** performance.now() at arrival (t1). */
  t1: number;
}

declare module 'hono' {
  interface ContextVariableMap {
    request: RequestState;
  }
}

/** Output tokens assumed for KV sizing when a chat request names no max_tokens. */
export const DEFAULT_MAX_TOKENS = 256;
