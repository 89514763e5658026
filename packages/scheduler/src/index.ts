export { SchedulerError, ScriptCode } from './codes.js';
export type {
  ConfigureOptions,
  ControlWrite,
  EndResult,
  EnqueueRequest,
  EnqueueResult,
  Fence,
  GrantSource,
  HandoverResult,
  HeartbeatResult,
  LeadershipResult,
  LimitStanding,
  LimitsStanding,
  Notice,
  PodAdapterReport,
  PodLoadReport,
  PodSnapshot,
  PolledNotices,
  ReclaimReport,
  ReleaseOptions,
  Scheduler,
  SchedulerSnapshot,
  ServiceCounterSnapshot,
  TenantSnapshot,
  UsageBucket,
  UsageCount,
} from './contract.js';
export { QUIET_MS } from './contract.js';
export { GrantChannel, type GrantChannelOptions } from './grant-channel.js';
export { type PoolKeys, poolKeys } from './keys.js';
export { LocalScheduler, type LocalSchedulerOptions } from './local/local-scheduler.js';
export {
  createRedisConnection,
  type HostPort,
  type RedisConnection,
  type RedisConnectionOptions,
  type RedisTopology,
} from './redis/connection.js';
export { RedisScheduler, type RedisSchedulerOptions } from './redis/redis-scheduler.js';
export { canHandOver } from './requests.js';
export type {
  GatingConfig,
  PodConfig,
  PodHealth,
  SchedulerSettings,
  SchedulerSettingsInput,
  TenantConfig,
  TokenBucketConfig,
} from './settings.js';
