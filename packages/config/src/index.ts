export { apiKeyDigest } from './keys.js';
export {
  applyEnvOverrides,
  ConfigError,
  ENV_PREFIX,
  formatKey,
  loadConfigFile,
  parseConfig,
  parseConfigText,
} from './load.js';
export {
  type AdmissionSectionConfig,
  type ControllerSectionConfig,
  configSchema,
  DEFAULT_SLO_CLASSES,
  type FairgateConfig,
  type LeaderConfig,
  type PodConfig,
  type RedisSectionConfig,
  type SaturationSectionConfig,
  type SchedulerConfig,
  type ServerSectionConfig,
  type ShutdownSectionConfig,
  type TenantConfig,
  type TokenBucketConfig,
  type UpstreamConfig,
} from './schema.js';
export {
  type ScrapeConfig,
  scrapeSchema,
  type TunerConfig,
  type TunerModelConfig,
  tunerModelSchema,
  tunerSchema,
} from './tuner-schema.js';
export { ConfigWatcher, type ConfigWatcherEvents } from './watch.js';
