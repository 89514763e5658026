import { type FairgateConfig, type PodConfig, poolView } from '@fairgate/config';
import type { Scheduler } from '@fairgate/scheduler';
import { createGatewayMetrics, type GatewayMetrics } from '@fairgate/telemetry';
import { ControlPlane } from './control/control-plane.js';
import { PoolDiscovery } from './discovery/pool-discovery.js';
import { LocalShare, type OutageState, outageState } from './local-share.js';
import { type OutageMode, OutageMonitor, SchedulerUnavailable } from './redis-outage.js';
import { resilientScheduler } from './resilient-scheduler.js';
import { applyConfig, createScheduler } from './scheduler-setup.js';
import { GrantBroker } from './slot/grant-broker.js';
import { HeldLeases } from './slot/held-leases.js';
import { SlotRecycler } from './slot/slot-recycler.js';
import { AdapterLoader } from './upstream/adapter-loader.js';
import { PodModels } from './upstream/pod-models.js';
import { PodPool } from './upstream/pods.js';
import { UsageMeter } from './usage/usage-meter.js';

/**
 * One pool as this replica runs it (config `pools:`, or the single pool of top-level
 * `pods`): its scheduler (shared through Redis under the pool's hash tag `{fg:<pool>}`, or
 * embedded), the grant broker its waiting requests wait in, its pods, and its control plane
 * (leader election, controller, tuner and scraper: one leader per pool). Everything here
 * reads the pool's view of the config (poolView), so none of it knows of other pools; the
 * request path picks the pool by the request's model (request/receive.ts).
 */
export class PoolRuntime {
  readonly name: string;
  readonly scheduler: Scheduler;
  /** Queued requests of this pool waiting for their grant (queued → granted). */
  readonly broker: GrantBroker;
  /** Granted requests of this pool until released (granted → held): heartbeats, evictions. */
  readonly leases: HeldLeases;
  /** Slot recycling (the Redis scheduler only: the embedded one's enqueue costs no trip). */
  readonly recycler: SlotRecycler | undefined;
  readonly pods: PodPool;
  /** Where the pool's pods are discovered (config `discovery`), besides its `pods:` list. */
  readonly discovery: PoolDiscovery | undefined;
  /** What the pods list in their GET /v1/models (refreshed every upstream.models_refresh_ms). */
  readonly models: PodModels;
  /** Loads LoRA adapters on pods before a forward (`routing.lora_load: on`). */
  readonly adapters: AdapterLoader;
  readonly control: ControlPlane;
  /** What the pods reported at release, per tenant and model (GET /admin/usage). */
  readonly usage: UsageMeter;
  /** The pool's metrics: every series carries `pool` (and `replica`). */
  readonly metrics: GatewayMetrics;
  /** 'redis' (shared, any number of replicas) or 'embedded' (LocalScheduler, one replica). */
  readonly mode: 'redis' | 'embedded';
  /** Redis outage handling (absent on the embedded scheduler). */
  readonly outage: OutageState | undefined;
  readonly #monitor: OutageMonitor | undefined;
  readonly #localShare: LocalShare | undefined;
  readonly #closeScheduler: () => Promise<void>;
  readonly #config: () => FairgateConfig;
  readonly #options: PoolRuntimeOptions;
  /** The config could not be written at start (Redis away): written when Redis is back. */
  #applyWhenBack = false;

  /**
   * Builds the pool's parts in dependency order: the pods, the outage monitor, the
   * scheduler, the leases, the broker, the recycler, the control plane, the local share.
   * Each callback handed to a part reads only parts assigned before this constructor
   * returns, and none of them can run before then: they answer a health check, a Redis
   * error or an outage, and nothing runs a check or a scheduler call until start/run.
   */
  private constructor(name: string, options: PoolRuntimeOptions) {
    const { replica, log } = options;
    this.name = name;
    this.#options = options;
    this.#config = () => poolView(options.config(), name);
    const config = this.#config();
    const metrics = createGatewayMetrics({ replica, pool: name });
    this.metrics = metrics;
    this.pods = new PodPool(config.pods, config.upstream, {
      onHealthChange: (pod, isHealthy) => {
        metrics.podHealthy.set({ pod }, isHealthy ? 1 : 0);
        log(`fairgate: pod ${pod} is ${isHealthy ? 'healthy' : 'unhealthy: ejected'}`);
        void this.scheduler
          .setPodHealth([{ name: pod, healthy: isHealthy }])
          .catch(() => metrics.redisErrors.inc({ operation: 'setPodHealth' }));
      },
      resolveUnknown: (pod) => this.discovery?.resolve(pod),
    });
    for (const pod of config.pods) metrics.podHealthy.set({ pod: pod.name }, 1);
    this.discovery = config.discovery
      ? new PoolDiscovery({
          pool: name,
          discovery: config.discovery,
          pods: this.pods,
          staticPods: () => this.#config().pods,
          log,
          onError: () => metrics.discoveryErrors.inc(),
        })
      : undefined;
    this.discovery?.onChange(({ joined, left }) => {
      metrics.discoveredPods.set(this.discovery?.pods?.length ?? 0);
      for (const pod of joined) {
        metrics.podHealthy.set({ pod }, this.pods.get(pod)?.healthy ? 1 : 0);
      }
      for (const pod of left) metrics.podHealthy.remove({ pod });
    });
    this.models = new PodModels(this.pods, () => this.#config().upstream.models_refresh_ms);
    const healthy = (pod: string) => this.pods.get(pod)?.healthy ?? true;
    this.adapters = new AdapterLoader({
      pods: this.pods,
      models: this.models,
      paths: () => this.#config().routing.lora_paths,
      refreshMs: () => this.#config().upstream.models_refresh_ms,
      onLoad: (pod, result) => metrics.loraLoads.inc({ pod, result }),
      scheduler: { dropPodAdapter: (pod, adapter) => this.scheduler.dropPodAdapter(pod, adapter) },
      log,
      onError: (operation) => metrics.redisErrors.inc({ operation }),
    });

    const outageMode = config.redis?.on_outage;
    const monitor = outageMode
      ? new OutageMonitor({
          mode: outageMode,
          // Through the resilient scheduler: its success ends the outage and sends the
          // deferred releases.
          probe: () => this.scheduler.heartbeat(replica),
          onEnter: (reason) => this.#enterOutage(outageMode, reason),
          onLeave: (outageMs) => this.#leaveOutage(outageMode, outageMs),
        })
      : undefined;
    this.#monitor = monitor;
    const created = createScheduler(config, (error) => {
      metrics.redisErrors.inc({ operation: 'connection' });
      monitor?.unreachable(`connection: ${error.message}`);
    });
    this.mode = created.mode;
    this.#closeScheduler = created.close;
    const inner = created.scheduler;
    if (monitor) metrics.redisOutage.set({ mode: monitor.mode }, 0);
    const scheduler = monitor
      ? resilientScheduler(inner, {
          monitor,
          reseed: async () => {
            await applyConfig(inner, this.#config(), healthy, 'seed');
            await this.broker.readopt(inner);
          },
          onReseeded: () => {
            metrics.schedulerReseeds.inc();
            log(
              `fairgate: pool ${name}: its shared state was missing in Redis: restored from this replica's config`,
            );
          },
          onReseedFailed: (error) =>
            log(`fairgate: pool ${name}: restoring its shared state failed: ${String(error)}`),
          callTimer: (operation) => metrics.redisCall.labels({ operation }),
        })
      : inner;
    this.scheduler = scheduler;

    const onError = (operation: string) => metrics.redisErrors.inc({ operation });
    const { tick_ms: tickMs, heartbeat_ms: heartbeatMs } = config.scheduler;
    const leases = new HeldLeases({ scheduler, replica, heartbeatMs, onError });
    this.leases = leases;
    this.broker = new GrantBroker({ scheduler, leases, replica, tickMs, onError });
    this.recycler =
      created.mode === 'redis'
        ? new SlotRecycler({
            scheduler,
            leases,
            holdMs: () => this.#config().scheduler.recycle_ms,
            // A slot is handed on only while Redis answers: not from the moment its
            // connection drops (before any call times out), nor during an outage.
            available: () => created.connected() && !monitor?.down,
            healthy: (pod) => this.pods.get(pod)?.healthy ?? false,
            onRecycled: () => metrics.slotsRecycled.inc(),
            onError,
          })
        : undefined;
    this.usage = new UsageMeter({
      scheduler,
      metrics,
      retentionS: () => this.#config().usage.retention_days * 86_400,
      flushMs: () => this.#config().usage.flush_ms,
      tokenWeights: () => this.#config().scheduler.token_weights,
    });
    this.control = new ControlPlane({
      scheduler,
      replica,
      config: this.#config,
      pods: () => this.podConfigs(),
      models: this.models,
      ...(this.discovery ? { discovery: { source: this.discovery, pods: this.pods } } : {}),
      metrics,
      log,
    });
    const localShare =
      monitor?.mode === 'local_share'
        ? new LocalShare({
            replica,
            config: this.#config,
            shared: scheduler,
            sharedLeases: leases,
            healthy,
            log,
          })
        : undefined;
    this.#localShare = localShare;
    this.outage = monitor ? outageState(monitor, () => localShare) : undefined;
  }

  /** Redis became unreachable: waiters fail, parked slots go back, the local share opens. */
  #enterOutage(mode: OutageMode, reason: string): void {
    this.#options.log(
      `fairgate: pool ${this.name}: Redis unreachable (${reason}): outage mode '${mode}'`,
    );
    this.metrics.redisOutage.set({ mode }, 1);
    this.metrics.redisOutages.inc({ mode });
    this.broker.failWaiters();
    this.recycler?.releaseAll();
    this.#localShare?.open();
  }

  /** Redis answers again: the local share drains, a config write that waited is sent. */
  #leaveOutage(mode: OutageMode, outageMs: number): void {
    this.#options.log(
      `fairgate: pool ${this.name}: Redis reachable again after ${Math.round(outageMs)} ms: outage mode over`,
    );
    this.metrics.redisOutage.set({ mode }, 0);
    void this.#localShare?.close();
    if (this.#applyWhenBack) {
      this.#applyWhenBack = false;
      void this.apply().catch(() => {
        this.#applyWhenBack = true;
      });
    }
  }

  /**
   * Builds a pool and writes its config into its scheduler. With Redis away at start the
   * write waits for Redis to come back (the pool starts in its outage mode).
   */
  static async start(name: string, options: PoolRuntimeOptions): Promise<PoolRuntime> {
    const pool = new PoolRuntime(name, options);
    if (pool.discovery) {
      pool.discovery.start();
      // Serving starts with the pods discovery lists, unless it cannot answer in time.
      const refreshMs = pool.config().discovery?.refresh_ms ?? 0;
      if (!(await pool.discovery.ready(Math.max(2_000, refreshMs)))) {
        options.log(
          `fairgate: pool ${name}: discovery has not answered yet: serving with the config's pods until it does`,
        );
      }
    }
    // A pool that serves what its pods list knows it before the first request.
    if (pool.discoversModels()) await pool.models.ready();
    try {
      await pool.apply();
    } catch (error) {
      if (!(error instanceof SchedulerUnavailable)) throw error;
      pool.#applyWhenBack = true;
      options.log(
        `fairgate: pool ${name}: Redis unreachable at start (${String(error)}): the config is written when it is back`,
      );
    }
    return pool;
  }

  /** Whether the pool also serves every model its pods list (`pools[].discover_models`). */
  discoversModels(): boolean {
    const config = this.#options.config();
    return config.pools.find((pool) => pool.name === this.name)?.discoverModels ?? false;
  }

  /** The pool's pods in force: the config's, then the discovered ones. */
  podConfigs(): readonly PodConfig[] {
    const listed = this.#config().pods;
    const discovered = this.discovery?.pods;
    return discovered && discovered.length > 0 ? [...listed, ...discovered] : listed;
  }

  /** The pool's view of the config in force. */
  config(): FairgateConfig {
    return this.#config();
  }

  /** Writes the pool's settings, tenants and pods (with their health) into its scheduler. */
  apply(): Promise<void> {
    return applyConfig(
      this.scheduler,
      this.#config(),
      (pod) => this.pods.get(pod)?.healthy ?? true,
    );
  }

  /** A reloaded config: the pods' addresses and caps, then the scheduler's state. */
  reload(log: (line: string) => void): void {
    this.pods.update(this.podConfigs());
    void this.apply().catch((error) =>
      log(`fairgate: pool ${this.name}: applying reloaded config failed: ${String(error)}`),
    );
  }

  /** Starts the heartbeat of the held leases, the control plane and the pods' health checks. */
  run(): void {
    this.leases.start();
    this.control.start();
    this.pods.startHealthChecks();
    this.models.start();
    this.usage.start();
  }

  /** The lane of this pool's local share while Redis is away (local_share mode). */
  localLane() {
    return this.#localShare?.lane();
  }

  async close(): Promise<void> {
    await this.usage.stop();
    await this.discovery?.stop();
    await this.control.stop();
    this.#monitor?.close();
    await this.#localShare?.stop();
    this.recycler?.stop();
    this.broker.close();
    this.leases.close();
    this.models.stop();
    await this.pods.close();
    await this.#closeScheduler();
  }
}

export interface PoolRuntimeOptions {
  replica: string;
  /** The whole config in force (each pool reads its view of it). */
  config: () => FairgateConfig;
  log: (line: string) => void;
}
