import type { FairgateConfig } from '@fairgate/config';
import type { Scheduler } from '@fairgate/scheduler';
import type { GatewayMetrics } from '@fairgate/telemetry';
import { ControllerLoop } from './controller-loop.js';
import { LeaderElection } from './election.js';
import { JanitorLoop } from './janitor-loop.js';
import { LatencyRecorder } from './latency-recorder.js';
import { type MetricsFetcher, PodScraper } from './pod-scraper.js';
import { TunerLoop } from './tuner-loop.js';
import { WriteLedger } from './write-ledger.js';

export interface ControlPlaneOptions {
  scheduler: Scheduler;
  replica: string;
  config: () => FairgateConfig;
  metrics: GatewayMetrics;
  log: (line: string) => void;
  /** How the leader GETs a pod's /metrics (tests replace it). */
  fetchMetrics?: MetricsFetcher;
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

  constructor(options: ControlPlaneOptions) {
    const { scheduler, replica, metrics, log } = options;
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
      },
      onDeposed: (fence, reason) => {
        metrics.isLeader.set(0);
        log(`fairgate: replica ${replica} no longer leads (epoch ${fence.epoch}): ${reason}`);
        this.janitor.stepDown();
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
      metrics,
      log,
      ...(options.fetchMetrics ? { fetcher: options.fetchMetrics } : {}),
    });
    this.tuner = new TunerLoop({
      store: scheduler,
      election: this.election,
      config: options.config,
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
    metrics.isLeader.set(0);
  }

  start(): void {
    this.recorder.start();
    this.election.start();
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
