/** The class table and sheddable rule the gateway applies, for harnesses reading its results. */
export { DEFAULT_SLO_CLASSES } from '@fairgate/config';
export { isSheddablePriority } from '@fairgate/core';
export { createGatewayApp } from './app.js';
export type { GatewayDeps } from './context.js';
export {
  type DrainReport,
  defaultReplicaId,
  type GatewayOptions,
  type RunningGateway,
  startGateway,
} from './gateway.js';
export type { AdminState } from './routes/system.js';
