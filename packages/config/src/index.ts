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
  type ControllerSectionConfig,
  configSchema,
  DEFAULT_SLO_CLASSES,
  type FairgateConfig,
  type LeaderConfig,
  type PodConfig,
  type SchedulerConfig,
  type TenantConfig,
  type UpstreamConfig,
} from './schema.js';
export { ConfigWatcher, type ConfigWatcherEvents } from './watch.js';
