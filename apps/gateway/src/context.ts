import type { FairgateConfig } from '@fairgate/config';
import type { Scheduler } from '@fairgate/scheduler';
import type { GatewayMetrics } from '@fairgate/telemetry';
import type { Tracer } from '@opentelemetry/api';
import type { ControlPlane } from './control/control-plane.js';
import type { GrantBroker } from './grants.js';
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
