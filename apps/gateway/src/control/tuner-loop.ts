import type { FairgateConfig, PodConfig } from '@fairgate/config';
import {
  type CapacityReport,
  capacityReport,
  decodePodTuner,
  encodePodTuner,
  INITIAL_SCALE_SIGNAL,
  type ModelTuning,
  nextScaleSignal,
  type OutcomeRecord,
  observePeriod,
  outcomeOf,
  type PeriodObservation,
  type PodCounters,
  type PodPeriod,
  type PodTunerState,
  recordOutcome,
  type ScaleSignalState,
  skipPeriod,
  TUNER_OUTCOMES,
  tunePod,
} from '@fairgate/control';
import type { Fence, Scheduler } from '@fairgate/scheduler';
import type { GatewayMetrics } from '@fairgate/telemetry';
import type { LeaderElection } from './election.js';
import { LeaderTimer } from './leader-timer.js';
import type { PodScrape } from './pod-scraper.js';

/** Leader data fields: one per pod, and the last report (for /admin/capacity anywhere). */
export const TUNER_FIELD_PREFIX = 'tuner:';
export const CAPACITY_REPORT_FIELD = 'capacity';
/** A pod's model when its metrics carry no model_name. */
export const UNKNOWN_MODEL = 'default';

export interface CapacityView extends CapacityReport {
  /** Tuner periods run by the replica that wrote this. */
  period: number;
  periodS: number;
  sloMultiplier: number;
  writer: Fence;
  /** Date.now() of the writer when written. */
  writtenAt: number;
}

export interface TunerLoopOptions {
  store: Pick<Scheduler, 'getLeaderData' | 'setLeaderData'>;
  election: Pick<LeaderElection, 'holds'>;
  config: () => FairgateConfig;
  /** The pods to tune (the config's and the discovered ones); default: the config's. */
  pods?: () => readonly PodConfig[];
  metrics: GatewayMetrics;
  scrapes: { latest(pod: string): PodScrape | undefined };
  log: (line: string) => void;
}

class PeriodDropped extends Error {}

function countersOf(scrape: PodScrape): PodCounters {
  const m = scrape.metrics;
  return {
    atMs: scrape.atMs,
    ttft: m.ttft,
    itl: m.itl,
    promptTokens: m.promptTokens,
    generationTokens: m.generationTokens,
    requestSuccess: m.requestSuccess,
    requestGenerationTokens: m.requestGenerationTokens,
    queueTime: m.queueTime,
    gauges: scrape.gauges,
  };
}

export function modelTuning(config: FairgateConfig, model: string): ModelTuning {
  const t = config.tuner;
  const m = t.models[model];
  return {
    maxBatch: m?.max_batch ?? t.max_batch,
    maxQueue: m?.queue_size ?? t.queue_size,
    targetTtftMs: m?.target_ttft_ms,
    targetItlMs: m?.target_itl_ms,
  };
}

/**
 * The leader's capacity tuner: every tuner.period_s, for every pod, the period between
 * the previous tick's scrape and the latest one becomes an observation; the pod's EKF
 * (state restored from the leader data on election, so a new leader continues) takes one
 * step; each state and the capacity report are written back with fenced setLeaderData.
 * The first tick after election only takes the baseline scrapes.
 */
export class TunerLoop {
  readonly #timer = new LeaderTimer({
    periodMs: () => this.options.config().tuner.period_s * 1_000,
    from: 'start',
  });
  #states = new Map<string, PodTunerState>();
  #baseline = new Map<string, PodScrape>();
  #period = 0;
  #report: CapacityView | null = null;
  #signal: ScaleSignalState = INITIAL_SCALE_SIGNAL;
  /** Each pod's latest observation (the workload it is sized for in a quiet period). */
  readonly #lastObservation = new Map<string, PeriodObservation>();

  constructor(private readonly options: TunerLoopOptions) {}

  #pods(): readonly PodConfig[] {
    return this.options.pods?.() ?? this.options.config().pods;
  }

  /**
   * Drops the state and series of pods that are gone (discovery no longer lists them): a
   * pod that comes back under the same address starts afresh from its stored state.
   */
  #forgetGone(pods: readonly PodConfig[]): void {
    const names = new Set(pods.map((pod) => pod.name));
    const m = this.options.metrics;
    for (const pod of [...this.#states.keys()]) {
      if (names.has(pod)) continue;
      this.#states.delete(pod);
      this.#baseline.delete(pod);
      this.#lastObservation.delete(pod);
      for (const gauge of [m.tunerAlpha, m.tunerBeta, m.tunerGamma, m.tunerNis, m.capacityRps]) {
        gauge.remove({ pod });
      }
    }
  }

  /** The last report this replica computed while leading (null before the first). */
  get report(): CapacityView | null {
    return this.#report;
  }

  /** For controller.bootstrap: model. */
  controllerSuggestion(): { startCap: number; ceilingCap: number } | null {
    return this.#report?.controller ?? null;
  }

  lead(fence: Fence): void {
    this.#states.clear();
    this.#baseline.clear();
    this.#period = 0;
    this.#signal = INITIAL_SCALE_SIGNAL;
    this.#lastObservation.clear();
    // Every series from 0, so increase() sees a pod's first rejection.
    for (const pod of this.#pods()) {
      for (const result of TUNER_OUTCOMES) {
        this.options.metrics.tunerUpdates.inc({ pod: pod.name, result }, 0);
      }
    }
    // The first tick takes the baselines, after the scraper's first pass (interval + timeout).
    const scrape = this.options.config().scrape;
    this.#timer.start(() => this.tick(fence), scrape.interval_ms + scrape.timeout_ms);
  }

  stepDown(): void {
    this.#timer.stop();
    const m = this.options.metrics;
    for (const gauge of [
      m.tunerAlpha,
      m.tunerBeta,
      m.tunerGamma,
      m.tunerNis,
      m.capacityRps,
      m.desiredPods,
    ]) {
      gauge.reset();
    }
  }

  async stop(): Promise<void> {
    this.stepDown();
    await this.#timer.settled();
  }

  /** One period under `fence`; returns the report, or null (disabled, baseline or dropped). */
  async tick(fence: Fence): Promise<CapacityView | null> {
    const config = this.options.config();
    if (!config.tuner.enabled) return null;
    try {
      return await this.#tick(fence, config);
    } catch (error) {
      if (error instanceof PeriodDropped) {
        this.options.log(`fairgate: tuner period dropped: ${error.message}`);
        return null;
      }
      this.options.metrics.redisErrors.inc({ operation: 'tunerPeriod' });
      this.options.log(`fairgate: tuner period failed: ${String(error)}`);
      return null;
    }
  }

  async #tick(fence: Fence, config: FairgateConfig): Promise<CapacityView | null> {
    const { store, election, scrapes, metrics } = this.options;
    const stillLeading = () => {
      if (!election.holds(fence)) throw new PeriodDropped('leadership lost mid-period');
    };
    stillLeading();
    const tuner = config.tuner;
    const periods: PodPeriod[] = [];
    const changed: string[] = [];
    const outcomes: Array<[pod: string, record: OutcomeRecord]> = [];
    const pods = this.#pods();
    this.#forgetGone(pods);
    for (const pod of pods) {
      const name = pod.name;
      let state = this.#states.get(name);
      if (!state) {
        const decoded = decodePodTuner(await store.getLeaderData(TUNER_FIELD_PREFIX + name));
        stillLeading();
        if (decoded.problem) {
          this.options.log(`fairgate: tuner for pod ${name} starts afresh: ${decoded.problem}`);
        }
        state = decoded.state;
      }
      const latest = scrapes.latest(name);
      const previous = this.#baseline.get(name);
      const model = latest?.metrics.models[0] ?? UNKNOWN_MODEL;
      const fresh = latest !== undefined && latest !== previous;
      if (latest) this.#baseline.set(name, latest);
      const period: PodPeriod = { pod: name, model, state, observation: null, rate: 0 };
      // The first period after election only takes the baseline: no result.
      let record: OutcomeRecord | null = previous
        ? { at: Date.now(), outcome: 'no_observation', reason: 'no_scrape' }
        : null;
      if (fresh && previous) {
        const prev = countersOf(previous);
        const next = countersOf(latest);
        const periodS = (next.atMs - prev.atMs) / 1_000;
        const first = (next.ttft?.count ?? 0) - (prev.ttft?.count ?? 0);
        period.rate = periodS > 0 && first > 0 ? first / periodS : 0;
        const observed = observePeriod(prev, next, { minRequests: tuner.min_requests });
        if (observed.observation) {
          const t = modelTuning(config, model);
          const result = tunePod(state, observed.observation, {
            maxBatch: t.maxBatch,
            maxQueue: t.maxQueue,
          });
          state = result.state;
          period.observation = observed.observation;
          period.event = result.event;
          if (result.update) period.nis = result.update.nis;
          record = {
            at: Date.now(),
            outcome: outcomeOf(result.event),
            reason: result.event === 'reset' && !result.update ? 'restart' : result.update?.reason,
            nis:
              result.update && Number.isFinite(result.update.nis) ? result.update.nis : undefined,
          };
          if (result.event === 'bootstrapped' || result.event === 'reset') {
            this.options.log(`fairgate: tuner ${result.event} pod ${name}`);
          }
        } else {
          state = skipPeriod(state, observed.skipped);
          if (record) record.reason = observed.skipped;
        }
      }
      if (record) {
        state = recordOutcome(state, record);
        outcomes.push([name, record]);
        changed.push(name);
      }
      period.state = state;
      if (period.observation) this.#lastObservation.set(name, period.observation);
      else period.lastObservation = this.#lastObservation.get(name) ?? null;
      this.#states.set(name, state);
      periods.push(period);
    }
    this.#period++;
    for (const name of changed) {
      stillLeading();
      const written = await store.setLeaderData(
        fence,
        TUNER_FIELD_PREFIX + name,
        encodePodTuner(this.#states.get(name)!),
      );
      if (!written) throw new PeriodDropped('tuner state write refused by the fence');
    }
    const report = capacityReport(
      periods,
      (model) => modelTuning(config, model),
      tuner.slo_multiplier,
    );
    this.#signal = nextScaleSignal(this.#signal, report.need, {
      downPeriods: tuner.scale_down_periods,
      tolerance: tuner.scale_tolerance,
      minPods: tuner.min_pods,
    });
    const view: CapacityView = {
      ...report,
      // The scaling signal: the periods' need with hysteresis (scale-signal.ts).
      desiredPods: this.#signal.desired,
      period: this.#period,
      periodS: tuner.period_s,
      sloMultiplier: tuner.slo_multiplier,
      writer: fence,
      writtenAt: Date.now(),
    };
    stillLeading();
    const written = await store.setLeaderData(fence, CAPACITY_REPORT_FIELD, JSON.stringify(view));
    if (!written) throw new PeriodDropped('capacity report write refused by the fence');
    this.#report = view;
    if (election.holds(fence)) {
      for (const [pod, r] of Object.entries(report.pods)) {
        if (r.alphaMs !== null) metrics.tunerAlpha.set({ pod }, r.alphaMs);
        if (r.betaMs !== null) metrics.tunerBeta.set({ pod }, r.betaMs);
        if (r.gammaMs !== null) metrics.tunerGamma.set({ pod }, r.gammaMs);
        if (r.nis !== null && Number.isFinite(r.nis)) metrics.tunerNis.set({ pod }, r.nis);
        if (r.lambdaStar !== undefined) metrics.capacityRps.set({ pod }, r.lambdaStar);
      }
      if (view.desiredPods !== null) metrics.desiredPods.set(view.desiredPods);
      for (const [pod, record] of outcomes) {
        metrics.tunerUpdates.inc({ pod, result: record.outcome });
        if (record.reason) {
          metrics.tunerUnused.inc({ pod, result: record.outcome, reason: record.reason });
        }
      }
    }
    return view;
  }
}
