import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { hostname } from 'node:os';
import { ConfigWatcher, type FairgateConfig } from '@fairgate/config';
import type { Scheduler } from '@fairgate/scheduler';
import { createGatewayMetrics, startTelemetry, type Telemetry } from '@fairgate/telemetry';
import type { Hono } from 'hono';
import { createGatewayApp, gatewayRequestListener } from './app.js';
import type { GatewayDeps } from './context.js';
import { ControlPlane } from './control/control-plane.js';
import { Drain } from './drain.js';
import { draining } from './errors.js';
import { GrantBroker } from './grants.js';
import { guardHttpEdge, httpServerOptions } from './http-edge.js';
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
  /**
   * Graceful shutdown (SIGTERM; docs/gateway.md, *Drain*): /readyz and new requests answer
   * 503 `draining` at once, a leader gives the lease up at once, queued requests are handed
   * back (cancelled, 503 `draining`), in-flight ones get shutdown.drain_timeout_s to finish
   * and are then aborted (leases released); then close(). Idempotent. `cause` (e.g.
   * 'SIGTERM') starts its first log line.
   */
  drain(cause?: string): Promise<DrainReport>;
  /** Ends a drain now (a second SIGTERM): in-flight requests are aborted, then close(). */
  cutDrain(): void;
}

/** What a drain did (also its last log line). */
export interface DrainReport {
  /** Generation requests in progress when it began (queued ones included). */
  inProgress: number;
  /** Queued requests handed back (cancelled in the scheduler, answered 503 draining). */
  handedBack: number;
  /** In-flight requests aborted at the drain timeout (or by cutDrain). */
  aborted: number;
  /** From the start of the drain to the replica closed. */
  ms: number;
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
      callTimer: (operation) => metrics.redisCall.labels({ operation }),
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
    options.telemetry ??
    startTelemetry({
      serviceName: config.telemetry.service_name,
      env,
      traces: config.telemetry.traces,
    });
  const ownsTelemetry = options.telemetry === undefined;
  const sharedBroker = new GrantBroker({
    scheduler: sharedScheduler,
    replica,
    tickMs: config.scheduler.tick_ms,
    heartbeatMs: config.scheduler.heartbeat_ms,
    onError: (operation) => metrics.redisErrors.inc({ operation }),
  });
  broker = sharedBroker;
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
    drain: new Drain(),
    log,
  };
  const app = createGatewayApp(deps);
  broker.start();
  control.start();
  podPool.startHealthChecks();
  watcher.start();

  const host = options.host ?? config.listen.host;
  const requestedPort = options.port ?? config.listen.port;
  const server = createServer(httpServerOptions(config.server), gatewayRequestListener(deps, app));
  const port = await new Promise<number>((resolve, reject) => {
    server.once('error', reject);
    server.listen(requestedPort, host, () => {
      server.off('error', reject);
      resolve((server.address() as AddressInfo).port);
    });
  });
  const refused = (reason: string) => metrics.connectionsRefused.inc({ reason });
  guardHttpEdge(server, config.server, { onRefused: refused, log });
  installClientErrorHandler(server, (phase) => refused(`${phase}_timeout`));
  const shownHost = host === '0.0.0.0' ? '127.0.0.1' : host;
  const url = `http://${shownHost}:${port}`;
  log(
    `fairgate: replica ${replica} listening on ${url} (${created.mode} scheduler, ${config.pods.length} pods)`,
  );

  let closing: Promise<void> | undefined;
  let drained: Promise<DrainReport> | undefined;
  let cut: () => void = () => {};
  const cutRequested = new Promise<'second signal'>((resolve) => {
    cut = () => resolve('second signal');
  });
  const gateway: RunningGateway = {
    url,
    port,
    replica,
    app,
    deps,
    drain(cause) {
      drained ??= (async () => {
        const startedAt = performance.now();
        const timeoutMs = watcher.current.shutdown.drain_timeout_s * 1_000;
        const { drain } = deps;
        drain.begin();
        // First, so a follower leads within leader.renew_ms rather than the lease TTL.
        const leads = control.election.fence !== null;
        const steppingDown = control.stepDown();
        const inProgress = drain.active;
        const localLane = localShare?.lane(); // during a Redis outage in local_share mode
        const handedBackNow =
          sharedBroker.handBack(() => draining(HANDED_BACK)) +
          (localLane?.broker.handBack(() => draining(HANDED_BACK)) ?? 0);
        log(
          `fairgate: ${cause ? `${cause}: ` : ''}draining replica ${replica}: /readyz and new requests answer 503 draining; ${leads ? 'gives the leader lease up; ' : ''}${handedBackNow} queued requests handed back; ${inProgress - handedBackNow} in progress get ${timeoutMs / 1_000} s`,
        );
        const ended = await Promise.race([
          drain.idle(timeoutMs).then((idle) => (idle ? 'idle' : 'drain timeout')),
          cutRequested,
        ]);
        let aborted = 0;
        if (ended !== 'idle') {
          aborted = drain.cut();
          // Each aborted request unwinds and sends its release (cancelled) before we close.
          await drain.idle(500);
        }
        await steppingDown;
        await gateway.close(500);
        const report: DrainReport = {
          inProgress,
          handedBack: sharedBroker.handedBack + (localLane?.broker.handedBack ?? 0),
          aborted,
          ms: Math.round(performance.now() - startedAt),
        };
        log(
          `fairgate: drained replica ${replica} in ${report.ms} ms: ${report.inProgress} requests in progress at the start, ${report.handedBack} handed back, ${report.aborted} aborted${ended === 'idle' ? '' : ` (${ended})`}`,
        );
        return report;
      })();
      return drained;
    },
    cutDrain() {
      cut();
    },
    close(graceMs = 10_000) {
      closing ??= (async () => {
        watcher.stop();
        await new Promise<void>((resolve) => {
          server.close(() => resolve());
          const deadline = setTimeout(() => {
            server.closeAllConnections();
          }, graceMs);
          deadline.unref();
        });
        await control.stop();
        monitor?.close();
        await localShare?.stop();
        broker?.close();
        await podPool.close();
        await created.close();
        // Spans that cannot be flushed (collector away) are lost, not a failed shutdown.
        if (ownsTelemetry) {
          await telemetry
            .shutdown()
            .catch((error: unknown) =>
              log(`fairgate: telemetry flush at shutdown failed: ${String(error)}`),
            );
        }
      })();
      return closing;
    },
  };
  return gateway;
}

const HANDED_BACK =
  'This gateway replica is shutting down and handed the queued request back; retry on another replica';
