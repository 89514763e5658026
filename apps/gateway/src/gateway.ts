import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { hostname } from 'node:os';
import { setTimeout as delay } from 'node:timers/promises';
import { ConfigWatcher, type FairgateConfig } from '@fairgate/config';
import {
  createEdgeMetrics,
  registerProcessMetrics,
  startTelemetry,
  type Telemetry,
} from '@fairgate/telemetry';
import type { Hono } from 'hono';
import { createGatewayApp, gatewayRequestListener } from './app.js';
import type { BatchApi } from './batch/batch-api.js';
import type { GatewayDeps } from './context.js';
import { Drain } from './drain.js';
import { draining } from './errors.js';
import { guardHttpEdge, httpServerOptions } from './http-edge.js';
import { PoolRuntime, type PoolRuntimeOptions } from './pool-runtime.js';
import { Pools } from './pools.js';
import { installClientErrorHandler } from './server-errors.js';
import { JwtVerifier } from './tenancy/jwt.js';
import { Tenancy } from './tenancy/tenancy.js';
import { TenantDirectory } from './tenants.js';

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
  let pools: Pools | undefined;
  let tenancy: Tenancy | undefined;
  // The config in force: the file's, with the run-time tenants (tenancy/) after its own.
  const current = () => (tenancy ? tenancy.config(watcher.current) : watcher.current);
  // A new file or a changed tenant store: who each key is, then every pool's tenants.
  const applyTenants = () => {
    tenants = tenancy ? tenancy.directory(current()) : new TenantDirectory(current());
    for (const pool of pools?.all ?? []) pool.reload(log);
  };
  const watcher = new ConfigWatcher(
    options.configPath,
    {
      onReload: () => {
        applyTenants();
        log(`fairgate: config reloaded from ${options.configPath}`);
      },
      onRejected: (error) =>
        log(`fairgate: config reload refused, keeping the old one: ${error.message}`),
    },
    env,
  );
  tenancy = await Tenancy.start(watcher.current, log, () => {
    applyTenants();
    log(`fairgate: run-time tenants changed (version ${tenancy?.view.snapshot.version})`);
  });
  const config = current();
  applyTenants(); // no pool yet: only who each key is
  // JWTs beside API keys; jose is loaded only then. A reload cannot change auth.jwt.
  const jwtConfig = config.auth?.jwt;
  const jwt = jwtConfig
    ? await JwtVerifier.create(jwtConfig, {
        onJwksError: (error) => log(`fairgate: JWKS fetch failed: ${(error as Error).message}`),
      })
    : undefined;
  const metrics = createEdgeMetrics({ replica });
  pools = new Pools(await startPools(config, { replica, config: current, log }), current);
  // CPU, memory, event-loop delay and GC of this process, with the edge's series.
  const processMetrics = registerProcessMetrics(metrics.registry);
  const telemetry =
    options.telemetry ??
    (await startTelemetry({
      serviceName: config.telemetry.service_name,
      env,
      traces: config.telemetry.traces,
    }));
  // The Batch API needs Redis; its module (BullMQ's queues and workers) is loaded only then:
  // ~10 MB of RSS a replica on the embedded scheduler does not hold.
  const batch: BatchApi | undefined = config.redis
    ? (await import('./batch/batch-api.js')).startBatchApi({
        config: current,
        pools,
        metrics,
        tracer: telemetry.tracer,
        log,
      })
    : undefined;
  const deps: GatewayDeps = {
    replica,
    config: current,
    tenants: () => tenants!,
    pools,
    tracer: telemetry.tracer,
    metrics,
    mode: pools.first.mode,
    drain: new Drain(),
    log,
    files: batch?.files,
    batches: batch?.batches,
    tenancy,
    ...(jwt ? { jwt } : {}),
  };
  const app = createGatewayApp(deps);
  for (const pool of pools.all) pool.run();
  watcher.start();

  const host = options.host ?? config.listen.host;
  const server = createServer(httpServerOptions(config.server), gatewayRequestListener(deps, app));
  const port = await listen(server, options.port ?? config.listen.port, host);
  const refused = (reason: string) => metrics.connectionsRefused.inc({ reason });
  guardHttpEdge(server, config.server, { onRefused: refused, log });
  installClientErrorHandler(server, (phase) => refused(`${phase}_timeout`));
  const shownHost = host === '0.0.0.0' ? '127.0.0.1' : host;
  const url = `http://${shownHost}:${port}`;
  // Batch lines are requests to this replica's own server (batch/line-runner.ts).
  batch?.batches.work(url);
  log(
    `fairgate: replica ${replica} listening on ${url} (${deps.mode} scheduler, ${pools.all.map((pool) => `pool ${pool.name}: ${pool.pods.all.length} pods`).join(', ')})`,
  );
  const ownsTelemetry = options.telemetry === undefined;
  return runningGateway({ url, port, app, deps, watcher, server, batch, processMetrics }, () =>
    ownsTelemetry ? telemetry.shutdown() : Promise.resolve(),
  );
}

/** Starts every pool of the config; closes the ones started when one fails. */
async function startPools(
  config: FairgateConfig,
  options: PoolRuntimeOptions,
): Promise<PoolRuntime[]> {
  const runtimes: PoolRuntime[] = [];
  try {
    for (const pool of config.pools) runtimes.push(await PoolRuntime.start(pool.name, options));
  } catch (error) {
    await Promise.all(runtimes.map((pool) => pool.close()));
    throw error;
  }
  return runtimes;
}

/** Listens on `port` (0: any free one) and returns the port bound. */
function listen(server: Server, port: number, host: string): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve((server.address() as AddressInfo).port);
    });
  });
}

/** What a started replica is made of: what drain and close stop. */
interface Replica {
  url: string;
  port: number;
  app: Hono;
  deps: GatewayDeps;
  watcher: ConfigWatcher;
  server: Server;
  batch: BatchApi | undefined;
  processMetrics: { stop(): void };
}

function runningGateway(parts: Replica, stopTelemetry: () => Promise<void>): RunningGateway {
  const { url, port, app, deps } = parts;
  let closing: Promise<void> | undefined;
  let drained: Promise<DrainReport> | undefined;
  let cut: () => void = () => {};
  const cutRequested = new Promise<'second signal'>((resolve) => {
    cut = () => resolve('second signal');
  });
  const gateway: RunningGateway = {
    url,
    port,
    replica: deps.replica,
    app,
    deps,
    drain(cause) {
      drained ??= drainReplica(parts, cause, cutRequested, () => gateway.close(500));
      return drained;
    },
    cutDrain() {
      cut();
    },
    close(graceMs = 10_000) {
      closing ??= closeReplica(parts, graceMs, stopTelemetry);
      return closing;
    },
  };
  return gateway;
}

/** RunningGateway.drain: hand the queued back, let the in-flight end, then close. */
async function drainReplica(
  { deps, watcher, batch }: Replica,
  cause: string | undefined,
  cutRequested: Promise<'second signal'>,
  close: () => Promise<void>,
): Promise<DrainReport> {
  const startedAt = performance.now();
  const timeoutMs = watcher.current.shutdown.drain_timeout_s * 1_000;
  const { drain, log, replica } = deps;
  const { all } = deps.pools;
  drain.begin();
  // First, so a follower leads within leader.renew_ms rather than the lease TTL.
  const leads = all.some((pool) => pool.control.election.fence !== null);
  const steppingDown = Promise.all(all.map((pool) => pool.control.stepDown()));
  const inProgress = drain.active;
  // A pool's local lane exists during a Redis outage in local_share mode.
  const brokers = all.flatMap((pool) => [pool.broker, pool.localLane()?.broker ?? []].flat());
  const handedBackNow = brokers.reduce(
    (sum, broker) => sum + broker.handBack(() => draining(HANDED_BACK)),
    0,
  );
  // Slots go back as their requests end: nothing new will take one.
  for (const pool of all) pool.recycler?.stop();
  log(
    `fairgate: ${cause ? `${cause}: ` : ''}draining replica ${replica}: /readyz and new requests answer 503 draining; ${leads ? 'gives the leader lease up; ' : ''}${handedBackNow} queued requests handed back; ${inProgress - handedBackNow} in progress get ${timeoutMs / 1_000} s`,
  );
  // The batch workers take no new line; the lines they run end like any request.
  const batchesStopped = batch?.batches.stopWorking();
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
  await batchesStopped;
  await close();
  const report: DrainReport = {
    inProgress,
    handedBack: brokers.reduce((sum, broker) => sum + broker.handedBack, 0),
    aborted,
    ms: Math.round(performance.now() - startedAt),
  };
  log(
    `fairgate: drained replica ${replica} in ${report.ms} ms: ${report.inProgress} requests in progress at the start, ${report.handedBack} handed back, ${report.aborted} aborted${ended === 'idle' ? '' : ` (${ended})`}`,
  );
  return report;
}

/** RunningGateway.close: batch workers, the server (graceMs), the pools, telemetry. */
async function closeReplica(
  { deps, watcher, server, batch, processMetrics }: Replica,
  graceMs: number,
  stopTelemetry: () => Promise<void>,
): Promise<void> {
  watcher.stop();
  // Batch workers first, while the server still serves the lines they run.
  await Promise.race([batch?.batches.stopWorking(), delay(graceMs, undefined, { ref: false })]);
  await new Promise<void>((resolve) => {
    server.close(() => resolve());
    const deadline = setTimeout(() => {
      server.closeAllConnections();
    }, graceMs);
    deadline.unref();
  });
  await batch?.close();
  await deps.tenancy?.close();
  await Promise.all(deps.pools.all.map((pool) => pool.close()));
  processMetrics.stop();
  // Spans that cannot be flushed (collector away) are lost, not a failed shutdown.
  await stopTelemetry().catch((error: unknown) =>
    deps.log(`fairgate: telemetry flush at shutdown failed: ${String(error)}`),
  );
}

const HANDED_BACK =
  'This gateway replica is shutting down and handed the queued request back; retry on another replica';
