/** The class table and sheddable rule the gateway applies, for harnesses reading its results. */
export { DEFAULT_SLO_CLASSES } from '@fairgate/config';
export { isSheddablePriority } from '@fairgate/core';
export { createGatewayApp } from './app.js';
export type { GatewayDeps } from './context.js';
/** The leader's scrape of a pod's /metrics (bench/scrape.ts measures it). */
export { fetchMetrics, type MetricsFetcher } from './control/pod-scraper.js';
export {
  type DrainReport,
  defaultReplicaId,
  type GatewayOptions,
  type RunningGateway,
  startGateway,
} from './gateway.js';
export type { AdminState } from './routes/system.js';
