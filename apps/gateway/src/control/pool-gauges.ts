import type { FairgateConfig } from '@fairgate/config';
import { poolSaturation } from '@fairgate/core';
import type { Fence, Scheduler, SchedulerSnapshot } from '@fairgate/scheduler';
import type { GatewayMetrics } from '@fairgate/telemetry';
import type { LeaderElection } from './election.js';
import { LeaderTimer } from './leader-timer.js';

/** How often the leader refreshes the pool gauges (Prometheus scrapes every 5 s in infra/). */
export const POOL_GAUGES_MS = 1_000;

export interface PoolGaugesOptions {
  scheduler: Pick<Scheduler, 'snapshot'>;
  election: Pick<LeaderElection, 'holds'>;
  config: () => FairgateConfig;
  metrics: GatewayMetrics;
  everyMs?: number;
  onError?: (error: unknown) => void;
}

/**
 * The leader's export of the pool as the scheduler sees it, one snapshot a second: waiting
 * requests per band, in flight, budget, saturation (pool and per pod), live replicas, and the
 * pool-wide offered/admitted counters per tenant and class. Exact across replicas (the
 * replicas' own gauges only count what each holds). Only the leader exports them, so a sum
 * over replicas never double counts; they are cleared on step-down.
 */
export class PoolGauges {
  readonly #timer = new LeaderTimer({
    periodMs: () => this.options.everyMs ?? POOL_GAUGES_MS,
    from: 'end',
  });
  /** Last exported value of each pool counter, by metric and label key. */
  readonly #exported = new Map<string, number>();

  constructor(private readonly options: PoolGaugesOptions) {}

  lead(fence: Fence): void {
    this.#timer.start(() => this.refresh(fence), 0);
  }

  stepDown(): void {
    this.#timer.stop();
    const m = this.options.metrics;
    for (const metric of [
      m.poolWaiting,
      m.poolInflight,
      m.poolSaturation,
      m.poolReplicas,
      m.podSaturation,
      m.poolOffered,
      m.poolAdmitted,
    ]) {
      metric.reset();
    }
    this.#exported.clear();
  }

  async stop(): Promise<void> {
    this.stepDown();
    await this.#timer.settled();
  }

  /** One snapshot under `fence`, exported when this replica still leads afterwards. */
  async refresh(fence: Fence): Promise<void> {
    let snapshot: SchedulerSnapshot;
    try {
      snapshot = await this.options.scheduler.snapshot();
    } catch (error) {
      this.options.onError?.(error);
      return;
    }
    if (!this.options.election.holds(fence)) return;
    this.#export(snapshot);
  }

  #export(snapshot: SchedulerSnapshot): void {
    const { metrics } = this.options;
    const config = this.options.config();
    // Every configured band, so an empty band reads 0 rather than no data.
    const bands = new Set(Object.values(config.slo_classes).map(String));
    for (const band of Object.keys(snapshot.waitingByBand)) bands.add(band);
    for (const band of bands) {
      metrics.poolWaiting.set({ band }, snapshot.waitingByBand[band] ?? 0);
    }
    metrics.poolInflight.set(snapshot.inflight);
    metrics.budget.set(snapshot.budget);
    metrics.poolSaturation.set(snapshot.saturation);
    metrics.poolReplicas.set(
      snapshot.replicas.filter((r) => r.livenessExpiresAtMs > snapshot.nowMs).length,
    );
    const saturation = snapshot.settings?.saturation;
    for (const pod of snapshot.pods) {
      metrics.podSaturation.set(
        { pod: pod.name },
        poolSaturation([pod], snapshot.nowMs, saturation),
      );
    }
    for (const row of snapshot.counters) {
      const labels = { tenant: row.tenant, class: row.sloClass };
      this.#advance(metrics.poolOffered, 'offered', labels, row.offered);
      this.#advance(metrics.poolAdmitted, 'admitted', labels, row.admitted);
    }
  }

  /**
   * Moves a counter to the store's value. The store's counters only grow, unless Redis lost
   * its data: then the series restarts from the new value (a counter reset to Prometheus).
   */
  #advance(
    counter: GatewayMetrics['poolOffered'],
    name: string,
    labels: { tenant: string; class: string },
    value: number,
  ): void {
    const key = `${name}\u0000${labels.tenant}\u0000${labels.class}`;
    const last = this.#exported.get(key);
    if (last !== undefined && value < last) counter.remove(labels);
    const from = last !== undefined && value >= last ? last : 0;
    counter.inc(labels, value - from);
    this.#exported.set(key, value);
  }
}
