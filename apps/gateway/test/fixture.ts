import type { Telemetry } from '@fairgate/telemetry';
import {
  type AppHandle,
  type FlagValues,
  type GatewayConfigOptions,
  type RedisHandle,
  startRedis,
  startSim,
  writeGatewayConfig,
} from '@fairgate/testkit';
import { type RunningGateway, startGateway } from '../src/index.js';

/** One sim (pod-a), optionally a private Redis, and one in-process gateway in front. */
export interface GatewayStack {
  sim: AppHandle;
  redis: RedisHandle | undefined;
  gateway: RunningGateway;
  configPath: string;
  close(): Promise<void>;
}

export interface GatewayStackOptions {
  replicaId: string;
  simArgs?: FlagValues;
  withRedis?: boolean;
  config?: Omit<GatewayConfigOptions, 'pods' | 'redisUrl'>;
  telemetry?: Telemetry;
  log?: (line: string) => void;
}

export async function startGatewayStack(options: GatewayStackOptions): Promise<GatewayStack> {
  const sim = await startSim({ args: { model: 'sim-model', ...options.simArgs } });
  const redis = options.withRedis ? await startRedis() : undefined;
  const configPath = writeGatewayConfig({
    ...options.config,
    pods: [{ name: 'pod-a', url: sim.url }],
    ...(redis ? { redisUrl: redis.url } : {}),
  });
  const gateway = await startGateway({
    configPath,
    port: 0,
    replicaId: options.replicaId,
    log: options.log ?? (() => {}),
    ...(options.telemetry ? { telemetry: options.telemetry } : {}),
  });
  return {
    sim,
    redis,
    gateway,
    configPath,
    async close() {
      await gateway.close(1_000);
      await sim.stop();
      await redis?.stop();
    },
  };
}
