export { createGatewayApp } from './app.js';
export type { GatewayDeps } from './context.js';
export {
  type DrainReport,
  defaultReplicaId,
  type GatewayOptions,
  type RunningGateway,
  startGateway,
} from './gateway.js';
