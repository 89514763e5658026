import type { FairgateConfig, PodConfig } from '@fairgate/config';
import { isSheddablePriority } from '@fairgate/core';
import type { Scheduler } from '@fairgate/scheduler';
import type { ConfigGaugeValues, GatewayMetrics } from '@fairgate/telemetry';
import type { PoolDiscovery } from '../discovery/pool-discovery.js';
import type { PodPool } from '../upstream/pods.js';
import { ControllerLoop } from './controller-loop.js';
import { LeaderElection } from './election.js';
import { JanitorLoop } from './janitor-loop.js';
import { LatencyRecorder } from './latency-recorder.js';
import { type MetricsFetcher, PodScraper, type PodScraperOptions } from './pod-scraper.js';
import { PodSetWriter } from './pod-set-writer.js';
import { PoolGauges } from './pool-gauges.js';
import { TunerLoop } from './tuner-loop.js';
import { WriteLedger } from './write-ledger.js';

export interface ControlPlaneOptions {
  scheduler: Scheduler;
  replica: string;
  config: () => FairgateConfig;
  metrics: GatewayMetrics;
  log: (line: string) => void;
  /** The pool's pods in force: the config's and the discovered ones (scraped and tuned). */
  pods?: () => readonly PodConfig[];
  /** The pool's discovery, whose pods the leader writes into the shared state. */
  discovery?: { source: PoolDiscovery; pods: PodPool };
  /** How the leader GETs a pod's /metrics (tests replace it). */
  fetchMetrics?: MetricsFetcher;
  /** What each pod listed last on GET /v1/models (the adapters it holds). */
  models?: PodScraperOptions['models'];
}

/**
 * This replica's part in the leader duties: it always records and flushes its TTFT window
 * and runs the election; while it leads, it runs the controller, the pod scraper and the
 * capacity tuner.
 */
export class ControlPlane {
  readonly recorder: LatencyRecorder;
  readonly election: LeaderElection;
  readonly controller: ControllerLoop;
  readonly scraper: PodScraper;
  readonly tuner: TunerLoop;
  readonly ledger: WriteLedger;
  readonly janitor: JanitorLoop;
  readonly poolGauges: PoolGauges;
  readonly podSet: PodSetWriter | undefined;

  constructor(options: ControlPlaneOptions) {
    const { scheduler, replica, metrics, log } = options;
    const pods = options.pods ?? (() => options.config().pods);
    const leader = options.config().leader;
    this.ledger = new WriteLedger(metrics);
    this.recorder = new LatencyRecorder({
      scheduler,
      onError: () => metrics.redisErrors.inc({ operation: 'flushLatency' }),
    });
    this.election = new LeaderElection({
      store: scheduler,
      replica,
      leaseTtlMs: leader.lease_ttl_ms,
      renewMs: leader.renew_ms,
      onElected: (fence) => {
        this.ledger.elected(fence.epoch);
        metrics.isLeader.set(1);
        log(`fairgate: replica ${replica} leads (epoch ${fence.epoch})`);
        this.scraper.lead(fence);
        this.tuner.lead(fence);
        this.controller.lead(fence);
        this.janitor.lead();
        this.poolGauges.lead(fence);
        this.podSet?.lead(fence);
      },
      onDeposed: (fence, reason) => {
        metrics.isLeader.set(0);
        log(`fairgate: replica ${replica} no longer leads (epoch ${fence.epoch}): ${reason}`);
        this.janitor.stepDown();
        this.podSet?.stepDown();
        this.poolGauges.stepDown();
        this.controller.stepDown();
        this.tuner.stepDown();
        this.scraper.stepDown();
      },
      onStaleRenewal: () => this.ledger.rejected('renew'),
      onError: (operation) => metrics.redisErrors.inc({ operation }),
    });
    this.scraper = new PodScraper({
      store: scheduler,
      election: this.election,
      config: options.config,
      pods,
      metrics,
      log,
      ...(options.fetchMetrics ? { fetcher: options.fetchMetrics } : {}),
      ...(options.models ? { models: options.models } : {}),
    });
    this.tuner = new TunerLoop({
      store: scheduler,
      election: this.election,
      config: options.config,
      pods,
      metrics,
      scrapes: this.scraper,
      log,
    });
    this.controller = new ControllerLoop({
      scheduler,
      election: this.election,
      config: options.config,
      metrics,
      ledger: this.ledger,
      log,
      capacity: () => this.tuner.controllerSuggestion(),
    });
    this.janitor = new JanitorLoop({
      scheduler,
      everyMs: () => options.config().scheduler.heartbeat_ms,
      onError: () => metrics.redisErrors.inc({ operation: 'reclaim' }),
    });
    this.poolGauges = new PoolGauges({
      scheduler,
      election: this.election,
      config: options.config,
      metrics,
      onError: () => metrics.redisErrors.inc({ operation: 'poolGauges' }),
    });
    const discovery = options.discovery;
    this.podSet = discovery
      ? new PodSetWriter({
          scheduler,
          election: this.election,
          discovery: discovery.source,
          pods: discovery.pods,
          everyMs: () => options.config().discovery?.refresh_ms ?? 5_000,
          onError: () => metrics.redisErrors.inc({ operation: 'syncPods' }),
          onRejected: () => this.ledger.rejected('pod_set'),
        })
      : undefined;
    metrics.readConfigFrom(() => configGaugeValues(options.config()));
    metrics.isLeader.set(0);
  }

  start(): void {
    this.recorder.start();
    this.election.start();
  }

  /**
   * Gives leadership up now, at the start of a drain: the election stops and releases the
   * lease (after deposing, which ends the leader duties), so a follower takes over on its
   * next try, within leader.renew_ms, instead of after the lease TTL. The recorder keeps flushing the TTFTs of the requests still finishing; stop() ends
   * the rest. Bounded like stop(): with the store unreachable the lease simply lapses.
   */
  async stepDown(boundMs = 2_000): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, boundMs);
    });
    await Promise.race([this.election.stop().catch(() => {}), bound]);
    clearTimeout(timer);
  }

  /**
   * Ends the controller, gives the lease up and flushes the last latencies. Bounded: with
   * the store unreachable, shutdown does not wait for it (the lease then simply lapses).
   */
  async stop(boundMs = 2_000): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, boundMs);
    });
    // All of them stop their timers synchronously before their first await.
    this.janitor.stepDown();
    const stopping = Promise.all([
      this.podSet?.stop(),
      this.poolGauges.stop(),
      this.controller.stop(),
      this.tuner.stop(),
      this.scraper.stop(),
      this.election.stop(),
      this.recorder.stop(),
    ]);
    await Promise.race([stopping.catch(() => {}), bound]);
    clearTimeout(timer);
  }
}

/**
 * The config gauges: each class's priority and p99 TTFT target (its
 * scheduler.slo_targets_ms entry, else the controller's target for protected classes), and
 * the controller's cap range while it is enabled. Read at every scrape, so a hot reload shows.
 */
export function configGaugeValues(config: FairgateConfig): ConfigGaugeValues {
  const controller = config.controller;
  const classes = Object.entries(config.slo_classes).map(([name, priority]) => {
    const classTargetMs = config.scheduler.slo_targets_ms[name];
    const ttftTargetS =
      classTargetMs !== undefined
        ? classTargetMs / 1_000
        : !isSheddablePriority(priority)
          ? controller.target_p99_ttft_s
          : undefined;
    return { name, priority, ...(ttftTargetS !== undefined ? { ttftTargetS } : {}) };
  });
  return controller.enabled
    ? {
        classes,
        capPerWorkerMin: controller.cap_per_worker_min,
        capPerWorkerMax: controller.cap_per_worker_max,
      }
    : { classes };
}
