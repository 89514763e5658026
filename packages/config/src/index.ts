export { apiKeyDigest } from './keys.js';
export {
  ConfigError,
  parseConfig,
  parseConfigText,
} from './load.js';
export { ModelRoutes, poolView } from './pools.js';
export {
  type AdmissionSectionConfig,
  type BatchSectionConfig,
  type ControllerSectionConfig,
  configSchema,
  DEFAULT_SLO_CLASSES,
  type DiscoveryConfig,
  type FairgateConfig,
  type LeaderConfig,
  type PodConfig,
  type PoolConfig,
  poolSchema,
  type RedisSectionConfig,
  type RoutingConfig,
  type SaturationSectionConfig,
  type SchedulerConfig,
  type ServerSectionConfig,
  type ShutdownSectionConfig,
  type TenantConfig,
  type TokenBucketConfig,
  type UpstreamConfig,
} from './schema.js';
export { parseRuntimeTenant } from './tenants.js';
export type {
  ScrapeConfig,
  TunerConfig,
  TunerModelConfig,
} from './tuner-schema.js';
export { ConfigWatcher, type ConfigWatcherEvents } from './watch.js';
