import { hostname } from 'node:os';
import { ConfigWatcher, type FairgateConfig } from '@fairgate/config';
import type { Scheduler } from '@fairgate/scheduler';
import { createGatewayMetrics, startTelemetry, type Telemetry } from '@fairgate/telemetry';
import { type ServerType, serve } from '@hono/node-server';
import type { Hono } from 'hono';
import { createGatewayApp } from './app.js';
import type { GatewayDeps } from './context.js';
import { ControlPlane } from './control/control-plane.js';
import { GrantBroker } from './grants.js';
import { LocalShare, outageState } from './local-share.js';
import { OutageMonitor, SchedulerUnavailable } from './redis-outage.js';
import { resilientScheduler } from './resilient-scheduler.js';
import { applyConfig, createScheduler } from './scheduler-setup.js';
import { installClientErrorHandler } from './server-errors.js';
import { TenantDirectory } from './tenants.js';
import { PodPool } from './upstream/pods.js';

export interface GatewayOptions {
  configPath: string;
  port?: number;
  host?: string;
  replicaId?: string;
  /** Tests pass their own (in-memory exporter); otherwise started from OTEL_* env. */
  telemetry?: Telemetry;
  env?: NodeJS.ProcessEnv;
  log?: (line: string) => void;
}

export interface RunningGateway {
  readonly url: string;
  readonly port: number;
  readonly replica: string;
  readonly app: Hono;
  readonly deps: GatewayDeps;
  /** Stops accepting, waits for in-flight requests (up to graceMs), then closes everything. */
  close(graceMs?: number): Promise<void>;
}

export function defaultReplicaId(): string {
  return `${hostname()}-${process.pid}`.replace(/[^A-Za-z0-9._:@/-]/g, '-');
}

/** Builds and starts one gateway replica. A bad config throws a ConfigError naming the key. */
export async function startGateway(options: GatewayOptions): Promise<RunningGateway> {
  const log = options.log ?? ((line: string) => console.log(line));
  const env = options.env ?? process.env;
  const replica = options.replicaId ?? defaultReplicaId();
  let tenants: TenantDirectory | undefined;
  let pods: PodPool | undefined;
  let scheduler: GatewayDeps['scheduler'] | undefined;
  const watcher = new ConfigWatcher(
    options.configPath,
    {
      onReload: (next: FairgateConfig) => {
        tenants = new TenantDirectory(next);
        pods?.update(next.pods);
        if (scheduler && pods) {
          const pool = pods;
          void applyConfig(scheduler, next, (pod) => pool.get(pod)?.healthy ?? true).catch(
            (error) => log(`fairgate: applying reloaded config failed: ${String(error)}`),
          );
        }
        log(`fairgate: config reloaded from ${options.configPath}`);
      },
      onRejected: (error) =>
        log(`fairgate: config reload refused, keeping the old one: ${error.message}`),
    },
    env,
  );
  const config = watcher.current;
  tenants = new TenantDirectory(config);
  const metrics = createGatewayMetrics({ replica });
  const created = createScheduler(config, (error) => {
    metrics.redisErrors.inc({ operation: 'connection' });
    monitor?.unreachable(`connection: ${error.message}`);
  });
  const inner = created.scheduler;
  let monitor: OutageMonitor | undefined;
  let broker: GrantBroker | undefined;
  let localShare: LocalShare | undefined;
  /** The config could not be written at start (Redis away): written when Redis is back. */
  let applyWhenBack = false;
  const healthy = (name: string) => pods?.get(name)?.healthy ?? true;
  let sharedScheduler: Scheduler = inner;
  if (created.mode === 'redis' && config.redis) {
    const mode = config.redis.on_outage;
    const outageMonitor = new OutageMonitor({
      mode,
      probe: () => sharedScheduler.heartbeat(replica),
      onEnter: (reason) => {
        log(`fairgate: Redis unreachable (${reason}): outage mode '${mode}'`);
        metrics.redisOutage.set({ mode }, 1);
        metrics.redisOutages.inc({ mode });
        broker?.failWaiters();
        localShare?.open();
      },
      onLeave: (outageMs) => {
        log(`fairgate: Redis reachable again after ${Math.round(outageMs)} ms: outage mode over`);
        metrics.redisOutage.set({ mode }, 0);
        void localShare?.close();
        if (applyWhenBack) {
          applyWhenBack = false;
          void applyConfig(sharedScheduler, watcher.current, healthy).catch(() => {
            applyWhenBack = true;
          });
        }
      },
    });
    monitor = outageMonitor;
    metrics.redisOutage.set({ mode }, 0);
    sharedScheduler = resilientScheduler(inner, {
      monitor: outageMonitor,
      reseed: async () => {
        await applyConfig(inner, watcher.current, healthy, 'seed');
        await broker?.readopt(inner);
      },
      onReseeded: () => {
        metrics.schedulerReseeds.inc();
        log(
          "fairgate: the pool's shared state was missing in Redis: restored from this replica's config",
        );
      },
      onReseedFailed: (error) =>
        log(`fairgate: restoring the pool's shared state failed: ${String(error)}`),
    });
  }
  scheduler = sharedScheduler;
  pods = new PodPool(config.pods, config.upstream, {
    onHealthChange: (pod, isHealthy) => {
      metrics.podHealthy.set({ pod }, isHealthy ? 1 : 0);
      log(`fairgate: pod ${pod} is ${isHealthy ? 'healthy again' : 'unhealthy: ejected'}`);
      void applyConfig(sharedScheduler, watcher.current, healthy).catch(() =>
        metrics.redisErrors.inc({ operation: 'upsertPods' }),
      );
    },
  });
  for (const pod of config.pods) metrics.podHealthy.set({ pod: pod.name }, 1);
  const podPool = pods;
  try {
    await applyConfig(sharedScheduler, config, healthy);
  } catch (error) {
    if (!(error instanceof SchedulerUnavailable)) throw error;
    applyWhenBack = true;
    log(
      `fairgate: Redis unreachable at start (${String(error)}): the config is written when it is back`,
    );
  }
  const telemetry =
    options.telemetry ?? startTelemetry({ serviceName: config.telemetry.service_name, env });
  const ownsTelemetry = options.telemetry === undefined;
  broker = new GrantBroker({
    scheduler: sharedScheduler,
    replica,
    tickMs: config.scheduler.tick_ms,
    heartbeatMs: config.scheduler.heartbeat_ms,
    onError: (operation) => metrics.redisErrors.inc({ operation }),
  });
  const control = new ControlPlane({
    scheduler: sharedScheduler,
    replica,
    config: () => watcher.current,
    metrics,
    log,
  });
  if (monitor?.mode === 'local_share') {
    localShare = new LocalShare({
      replica,
      config: () => watcher.current,
      shared: sharedScheduler,
      sharedBroker: broker,
      healthy,
      log,
    });
  }
  const deps: GatewayDeps = {
    replica,
    config: () => watcher.current,
    tenants: () => tenants!,
    scheduler: sharedScheduler,
    broker,
    pods: podPool,
    tracer: telemetry.tracer,
    metrics,
    mode: created.mode,
    control,
    ...(monitor ? { outage: outageState(monitor, () => localShare) } : {}),
  };
  const app = createGatewayApp(deps);
  broker.start();
  control.start();
  podPool.startHealthChecks();
  watcher.start();

  const host = options.host ?? config.listen.host;
  const requestedPort = options.port ?? config.listen.port;
  const { server, port } = await new Promise<{ server: ServerType; port: number }>(
    (resolve, reject) => {
      const started = serve({ fetch: app.fetch, hostname: host, port: requestedPort }, (info) =>
        resolve({ server: started, port: info.port }),
      );
      started.once('error', reject);
    },
  );
  installClientErrorHandler(server);
  const shownHost = host === '0.0.0.0' ? '127.0.0.1' : host;
  const url = `http://${shownHost}:${port}`;
  log(
    `fairgate: replica ${replica} listening on ${url} (${created.mode} scheduler, ${config.pods.length} pods)`,
  );

  let closing: Promise<void> | undefined;
  return {
    url,
    port,
    replica,
    app,
    deps,
    close(graceMs = 10_000) {
      closing ??= (async () => {
        watcher.stop();
        await new Promise<void>((resolve) => {
          server.close(() => resolve());
          const deadline = setTimeout(() => {
            (server as { closeAllConnections?: () => void }).closeAllConnections?.();
          }, graceMs);
          deadline.unref();
        });
        await control.stop();
        monitor?.close();
        await localShare?.stop();
        broker?.close();
        await podPool.close();
        await created.close();
        if (ownsTelemetry) await telemetry.shutdown();
      })();
      return closing;
    },
  };
}
