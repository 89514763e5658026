import type { FairgateConfig } from '@fairgate/config';
import {
  type ControllerAction,
  decodeState,
  decodeWindow,
  encodeState,
  step,
  windowSecondsToRead,
} from '@fairgate/control';
import type { Fence, Scheduler } from '@fairgate/scheduler';
import type { GatewayMetrics } from '@fairgate/telemetry';
import type { LeaderElection } from './election.js';
import { LeaderTimer } from './leader-timer.js';
import { controllerSettings } from './settings.js';
import type { WriteLedger } from './write-ledger.js';

export interface ControllerLoopOptions {
  scheduler: Scheduler;
  election: Pick<LeaderElection, 'holds'>;
  config: () => FairgateConfig;
  metrics: GatewayMetrics;
  ledger: WriteLedger;
  log: (line: string) => void;
  /**
   * controller.bootstrap: model — the capacity tuner's suggestion per worker: start at the
   * model's concurrency at lambda*, never above the model's ceiling. null until it has one.
   */
  capacity?: () => { startCap: number; ceilingCap: number } | null;
}

/** Ended a tick early: leadership went away, or a fenced write was refused. */
class TickDropped extends Error {}

/**
 * The leader's controller loop: every tick_s it reads the shared window, the pool gauges
 * and the in-flight peak, runs the pure AIMD step and writes budget and state in one fenced
 * call. Ticks never overlap. Losing leadership at any await drops the tick: nothing after
 * that point is written, and the fence refuses anything already on its way.
 */
export class ControllerLoop {
  readonly #timer = new LeaderTimer({
    periodMs: () => this.options.config().controller.tick_s * 1_000,
    from: 'start',
  });
  #lastProblem: string | undefined;
  #waitingForTuner = false;

  constructor(private readonly options: ControllerLoopOptions) {}

  /** Called when this replica becomes leader: the first tick runs at once. */
  lead(fence: Fence): void {
    this.#timer.start(() => this.tick(fence), 0);
  }

  /** Called when leadership ends: no further ticks; leader-only gauges are cleared. */
  stepDown(): void {
    this.#timer.stop();
    const m = this.options.metrics;
    for (const gauge of [m.budget, m.capPerWorker, m.controllerP99Ttft, m.leaderEpoch]) {
      gauge.reset();
    }
  }

  async stop(): Promise<void> {
    this.stepDown();
    await this.#timer.settled();
  }

  /** One tick under `fence`; returns the action written, or null (disabled or dropped). */
  async tick(fence: Fence): Promise<ControllerAction | null> {
    const settings = controllerSettings(this.options.config());
    if (!settings.enabled) return null;
    try {
      return await this.#tick(fence, settings.config);
    } catch (error) {
      if (error instanceof TickDropped) {
        this.options.ledger.droppedTick();
        this.options.log(`fairgate: controller tick dropped: ${error.message}`);
        return null;
      }
      this.options.metrics.redisErrors.inc({ operation: 'controllerTick' });
      this.options.log(`fairgate: controller tick failed: ${String(error)}`);
      return null;
    }
  }

  async #tick(
    fence: Fence,
    configured: ReturnType<typeof controllerSettings>['config'],
  ): Promise<ControllerAction | null> {
    const { scheduler, election, metrics, ledger } = this.options;
    const stillLeading = () => {
      if (!election.holds(fence)) throw new TickDropped('leadership lost mid-tick');
    };
    stillLeading();
    const snapshot = await scheduler.snapshot();
    stillLeading();
    let config = configured;
    if (this.options.config().controller.bootstrap === 'model') {
      const suggestion = this.options.capacity?.() ?? null;
      if (suggestion) {
        const max = Math.max(
          config.capPerWorkerMin,
          Math.min(config.capPerWorkerMax, suggestion.ceilingCap),
        );
        config = {
          ...config,
          capPerWorkerMax: max,
          capPerWorker: Math.min(max, Math.max(config.capPerWorkerMin, suggestion.startCap)),
        };
      } else if (snapshot.controllerState === null) {
        // Nothing to start from yet: the first state waits for the tuner's first sizing.
        if (!this.#waitingForTuner) {
          this.#waitingForTuner = true;
          this.options.log('fairgate: controller waits for the capacity tuner (bootstrap: model)');
        }
        return null;
      }
    }
    const decoded = decodeState(snapshot.controllerState, config);
    if (decoded.problem && decoded.problem !== this.#lastProblem) {
      this.options.log(`fairgate: controller starts afresh: ${decoded.problem}`);
    }
    this.#lastProblem = decoded.problem;
    const seconds = windowSecondsToRead(decoded.state, config);
    const window = decodeWindow(await scheduler.readLatencyWindow(seconds));
    stillLeading();
    const peakInflight = await scheduler.takeInflightPeak(fence);
    if (peakInflight === null) {
      ledger.rejected('take_peak');
      throw new TickDropped('in-flight peak take refused by the fence');
    }
    const healthyPods = snapshot.pods.filter((pod) => pod.healthy).length;
    const { state, action } = step(
      decoded.state,
      {
        window,
        inflight: snapshot.inflight,
        waiting: snapshot.waiting,
        peakInflight,
        healthyPods,
      },
      config,
    );
    stillLeading();
    const written = await scheduler.setControl(fence, {
      budget: action.budget,
      state: encodeState(state, fence),
    });
    if (!written) {
      ledger.rejected('control');
      throw new TickDropped('controller write refused by the fence');
    }
    ledger.accepted(fence.epoch);
    metrics.controllerActions.inc({ action: action.kind });
    if (election.holds(fence)) {
      metrics.budget.set(action.budget);
      metrics.capPerWorker.set(action.capAfter);
      metrics.leaderEpoch.set(fence.epoch);
      if (typeof action.p99S === 'number') metrics.controllerP99Ttft.set(action.p99S);
    }
    if (action.kind !== 'hold') {
      this.options.log(`fairgate: controller ${action.kind}: ${action.reason}`);
    }
    return action;
  }
}
