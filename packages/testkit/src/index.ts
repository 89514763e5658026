export {
  type AppHandle,
  type FlagValues,
  type StartAppOptions,
  type StartGatewayOptions,
  startApp,
  startGatewayProcess,
  startSim,
  toFlags,
} from './apps.js';
export {
  DNSMASQ_MISSING_HELP,
  type DnsServerHandle,
  findDnsmasq,
  startDnsServer,
} from './dnsmasq.js';
export {
  defaultTestTenants,
  type GatewayConfigOptions,
  sha256Hex,
  TEST_KEYS,
  writeGatewayConfig,
} from './gateway-config.js';
export { appEntry, findExecutable, repoRoot } from './paths.js';
export { freePort } from './ports.js';
export {
  type ManagedProcess,
  type SpawnOptions,
  spawnManaged,
  stopAll,
  waitUntil,
} from './processes.js';
export {
  findRedisServer,
  pingRedis,
  REDIS_MISSING_HELP,
  type RedisHandle,
  startRedis,
} from './redis.js';
export {
  type RedisClusterHandle,
  type RedisClusterOptions,
  startRedisCluster,
} from './redis-cluster.js';
export type { HostPort } from './redis-process.js';
export {
  type RedisSentinelHandle,
  type RedisSentinelOptions,
  startRedisSentinel,
} from './redis-sentinel.js';
export {
  offerPhase,
  TUNER_DESIGN,
  TUNER_LIGHT_PHASE,
  TUNER_MAX_BATCH,
  TUNER_QUEUE,
  TUNER_SWEEP_WORKLOAD,
  TUNER_TARGETS,
  TUNER_TRUTH,
  type TunerPhase,
  tunerGatewaySections,
  tunerPhases,
  tunerWorkload,
  uniquePrompt,
} from './tuner-workload.js';
