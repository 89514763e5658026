export { rejectionOf, SchedulerError, ScriptCode, schedulerError } from './codes.js';
export type {
  ConfigureOptions,
  ControlWrite,
  EndResult,
  EnqueueRequest,
  EnqueueResult,
  Fence,
  HeartbeatResult,
  LeadershipResult,
  Notice,
  PodLoadReport,
  PodSnapshot,
  ReclaimReport,
  ReleaseOptions,
  Scheduler,
  SchedulerSnapshot,
  TenantSnapshot,
} from './contract.js';
export { type PoolKeys, poolKeys } from './keys.js';
export { LocalScheduler, type LocalSchedulerOptions } from './local/local-scheduler.js';
export {
  blockingDuplicate,
  createRedisConnection,
  type HostPort,
  type RedisConnection,
  type RedisConnectionOptions,
  type RedisTopology,
} from './redis/connection.js';
export { RedisScheduler, type RedisSchedulerOptions } from './redis/redis-scheduler.js';
export {
  DEFAULT_GATING,
  DEFAULT_SETTINGS,
  type GatingConfig,
  type PodConfig,
  resolveSettings,
  type SchedulerSettings,
  type SchedulerSettingsInput,
  type TenantConfig,
  type TokenBucketConfig,
} from './settings.js';
