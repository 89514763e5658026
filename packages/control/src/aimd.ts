import { summarizeWindow, type WindowCounts, type WindowSummary } from './window.js';

/**
 * The AIMD controller on p99 TTFT, as a pure step: (state, observation, config) ->
 * (state, action). The leader loop feeds it every tick; nothing here reads a clock.
 *
 * Designed against the four traps of docs/controller.md (*The four traps*):
 * - the signal is the gateway's TTFT (queue wait included), never the engine's;
 * - demand counts in-flight requests, not only queued ones;
 * - an increase also needs the window's peak in-flight at >= half the budget, so an
 *   app-limited pool never grows a budget it does not use;
 * - decreases are gentle (x0.75 by default), start from what was actually in flight
 *   (TCP's FlightSize rule: cutting an unused budget changes nothing), then hold for
 *   cooldown_ticks, and the next reading covers only samples taken after the cut.
 *
 * queueAware (off by default) adds one rule for p99 in or above the band: when the pods'
 * own part of it (the service TTFT, grant to first token) has its p99 below the band's
 * floor, the rest is queue wait, which a smaller budget only lengthens (the death spiral of
 * docs/controller.md, trap 2) and a larger one shortens while the pods have headroom: the controller
 * increases (queue_bound), under the same app-limited and maximum checks as any increase.
 * And when p99 is above the band while the pods' own p99 sits in the lower half of the band
 * (floor .. target), it holds (pods_in_band): the pods are where the target wants them and
 * the excess is queue wait, which neither direction removes; a cut there would only pause
 * dispatch (budget below in flight) and lengthen the queue's tail. Under overload it so
 * settles with the pods' own p99 between the band's floor and the target, whatever the
 * starting cap: above the target, the usual decrease; below the floor, queue_bound increases.
 */
export type DecreasePolicy =
  | { mode: 'multiplicative'; factor: number }
  | { mode: 'subtractive'; step: number };

export interface ControllerConfig {
  targetP99TtftS: number;
  tickS: number;
  windowS: number;
  /** Initial cap per worker (a new pool, or a stored state that cannot be read). */
  capPerWorker: number;
  capPerWorkerMin: number;
  capPerWorkerMax: number;
  /** Deadband: no action while p99 is within target x (1 +/- targetBandPct). */
  targetBandPct: number;
  /** Ticks held after a decrease (never after an increase). */
  cooldownTicks: number;
  decrease: DecreasePolicy;
  increaseStep: number;
  /** Fewer samples (failures included) than this: hold. */
  minSamples: number;
  /** Above the band because of queue wait alone (service p99 below the floor): increase. */
  queueAware?: boolean;
}

export type ActionKind = 'increase' | 'decrease' | 'hold';

/** Why the step did what it did (machine-readable; `reason` is the sentence). */
export type ActionCode =
  | 'below_band'
  | 'queue_bound'
  | 'pods_in_band'
  | 'above_band'
  | 'upstream_errors'
  | 'in_band'
  | 'cooldown'
  | 'few_samples'
  | 'no_demand'
  | 'app_limited'
  | 'at_max'
  | 'at_min'
  | 'no_healthy_pods';

export interface ControllerAction {
  tick: number;
  kind: ActionKind;
  code: ActionCode;
  reason: string;
  capBefore: number;
  capAfter: number;
  /** Budget written with this action: capAfter x healthy pods. */
  budget: number;
  /** Window p99 in seconds; null when empty, 'errors' when failures make up the top 1%. */
  p99S: number | null | 'errors';
  samples: number;
  errors: number;
  /** Most requests in flight at once over the window (pool-wide). */
  windowPeak: number;
}

export interface ControllerState {
  tick: number;
  capPerWorker: number;
  /** Ticks of forced hold left after a decrease. */
  cooldownLeft: number;
  /** Ticks since the last decrease, null when none is remembered. */
  ticksSinceDecrease: number | null;
  /** Pool-wide in-flight peak of each recent tick interval, oldest first. */
  peaks: number[];
  /** The last ACTION_HISTORY actions, oldest first. */
  actions: ControllerAction[];
}

export interface Observation {
  window: WindowCounts;
  inflight: number;
  waiting: number;
  /** Most requests in flight at once since the previous tick (pool-wide). */
  peakInflight: number;
  healthyPods: number;
}

export interface StepResult {
  state: ControllerState;
  action: ControllerAction;
}

export const ACTION_HISTORY = 32;

export function clampCap(cap: number, config: ControllerConfig): number {
  return Math.min(config.capPerWorkerMax, Math.max(config.capPerWorkerMin, Math.round(cap)));
}

export function initialState(config: ControllerConfig): ControllerState {
  return {
    tick: 0,
    capPerWorker: clampCap(config.capPerWorker, config),
    cooldownLeft: 0,
    ticksSinceDecrease: null,
    peaks: [],
    actions: [],
  };
}

/** Ticks whose peaks make up the window's peak. */
export function windowTicks(config: ControllerConfig): number {
  return Math.max(1, Math.ceil(config.windowS / config.tickS));
}

/**
 * Seconds of the shared window the next tick should read. After a decrease the stored
 * seconds still hold samples taken under the old, larger budget; reading them would cut
 * again for a state that no longer exists (the compounding overshoot: docs/controller.md, trap 4).
 * So the window shrinks to the whole seconds since the decrease, and grows back tick by
 * tick. Never below 2: replicas flush once a second, so the current store second alone is
 * often still empty.
 */
export const MIN_WINDOW_READ_S = 2;

export function windowSecondsToRead(state: ControllerState, config: ControllerConfig): number {
  if (state.ticksSinceDecrease === null) return config.windowS;
  const sinceDecrease = (state.ticksSinceDecrease + 1) * config.tickS;
  return Math.min(config.windowS, Math.max(MIN_WINDOW_READ_S, Math.floor(sinceDecrease)));
}

function formatSeconds(seconds: number): string {
  return `${seconds.toFixed(3)} s`;
}

/** One controller tick. */
export function step(
  previous: ControllerState,
  observation: Observation,
  config: ControllerConfig,
): StepResult {
  const cap = clampCap(previous.capPerWorker, config);
  const pods = Math.max(0, Math.floor(observation.healthyPods));
  const peaks = [...previous.peaks, Math.max(0, observation.peakInflight)].slice(
    -windowTicks(config),
  );
  const windowPeak = Math.max(...peaks);
  const summary = summarizeWindow(observation.window);
  const p99S: ControllerAction['p99S'] = Number.isNaN(summary.p99S)
    ? null
    : summary.p99S === Number.POSITIVE_INFINITY
      ? 'errors'
      : summary.p99S;
  const tick = previous.tick + 1;
  const decision = decide({
    previous,
    observation,
    config,
    cap,
    pods,
    windowPeak,
    summary,
    p99S,
    upper: config.targetP99TtftS * (1 + config.targetBandPct),
    lower: config.targetP99TtftS * (1 - config.targetBandPct),
  });
  const action: ControllerAction = {
    tick,
    kind: decision.kind,
    code: decision.code,
    reason: decision.reason,
    capBefore: cap,
    capAfter: decision.cap,
    budget: decision.cap * pods,
    p99S,
    samples: summary.samples,
    errors: summary.errors,
    windowPeak,
  };
  return { state: nextState(previous, action, peaks, config), action };
}

/** What one tick reads: the previous state, the observation and what the step derived. */
interface TickInput {
  previous: ControllerState;
  observation: Observation;
  config: ControllerConfig;
  /** The previous cap per worker, clamped to the config's range. */
  cap: number;
  pods: number;
  windowPeak: number;
  summary: WindowSummary;
  p99S: ControllerAction['p99S'];
  /** The band around the target: target x (1 +/- targetBandPct). */
  upper: number;
  lower: number;
}

interface Decision {
  kind: ActionKind;
  code: ActionCode;
  reason: string;
  cap: number;
}

function hold(t: TickInput, code: ActionCode, reason: string): Decision {
  return { kind: 'hold', code, reason, cap: t.cap };
}

/** The tick's action: the holds that need no reading first, then the rules on p99. */
function decide(t: TickInput): Decision {
  const { previous, config, summary } = t;
  if (t.pods === 0)
    return hold(t, 'no_healthy_pods', 'no healthy pods: budget 0 until one returns');
  if (previous.cooldownLeft > 0) {
    return hold(t, 'cooldown', `cooldown after a decrease (${previous.cooldownLeft} ticks left)`);
  }
  const seen = summary.samples + summary.errors;
  if (seen < config.minSamples) {
    return hold(t, 'few_samples', `${seen} samples in the window, fewer than ${config.minSamples}`);
  }
  const queueAware = config.queueAware ? decideOnQueueWait(t) : null;
  if (queueAware) return queueAware;
  if (summary.p99S > t.upper) return decrease(t, seen);
  if (summary.p99S >= t.lower) {
    return hold(t, 'in_band', `p99 ${formatSeconds(summary.p99S)} inside the band`);
  }
  const below = `p99 ${formatSeconds(summary.p99S)} below the band (${formatSeconds(t.lower)})`;
  if (t.observation.inflight <= 0 && t.observation.waiting <= 0) {
    return hold(t, 'no_demand', `${below}, but nothing in flight or waiting`);
  }
  return increase(t, 'below_band', below);
}

/**
 * queueAware's rules, for p99 in or above the band: increase when the pods' own p99 is below
 * the band's floor (queue_bound), hold when it is between the floor and the target while p99
 * is above the band (pods_in_band); null when neither applies.
 */
function decideOnQueueWait(t: TickInput): Decision | null {
  const { summary, lower } = t;
  if (t.p99S === 'errors') return null;
  if (summary.p99S >= lower && summary.serviceP99S < lower) {
    return increase(
      t,
      'queue_bound',
      `p99 ${formatSeconds(summary.p99S)} not below the band, but the pods' own p99 ${formatSeconds(summary.serviceP99S)} is below its floor (${formatSeconds(lower)}): the rest is queue wait`,
    );
  }
  const podsInBand =
    summary.p99S > t.upper &&
    summary.serviceP99S >= lower &&
    summary.serviceP99S <= t.config.targetP99TtftS;
  if (podsInBand) {
    return hold(
      t,
      'pods_in_band',
      `p99 ${formatSeconds(summary.p99S)} above the band, but the pods' own p99 ${formatSeconds(summary.serviceP99S)} is between the floor and the target: the rest is queue wait`,
    );
  }
  return null;
}

/** An increase by increaseStep, unless the pool is app-limited or the cap at its maximum. */
function increase(t: TickInput, code: ActionCode, why: string): Decision {
  const { cap, windowPeak } = t;
  const budget = cap * t.pods;
  if (windowPeak * 2 < budget) {
    return hold(
      t,
      'app_limited',
      `${why}, but the window's peak in flight ${windowPeak} is under half the budget ${budget}`,
    );
  }
  const next = clampCap(cap + t.config.increaseStep, t.config);
  if (next <= cap) return hold(t, 'at_max', `${why}, but the cap is at its maximum ${cap}`);
  return { kind: 'increase', code, reason: `${why}: ${cap} -> ${next}`, cap: next };
}

/**
 * A decrease from what was in flight at the window's peak (never above the cap), unless the
 * cap is at its minimum. `seen` is the window's samples and failures.
 */
function decrease(t: TickInput, seen: number): Decision {
  const { cap, config, summary, windowPeak } = t;
  const base = windowPeak > 0 ? Math.min(cap, Math.ceil(windowPeak / t.pods)) : cap;
  const cut =
    config.decrease.mode === 'multiplicative'
      ? Math.floor(base * config.decrease.factor)
      : base - config.decrease.step;
  const next = clampCap(cut, config);
  const cause =
    t.p99S === 'errors'
      ? `${summary.errors} of ${seen} requests failed upstream (more than the top 1%)`
      : `p99 ${formatSeconds(summary.p99S)} above the band (${formatSeconds(t.upper)})`;
  if (next >= cap) return hold(t, 'at_min', `${cause}, but the cap is at its minimum ${cap}`);
  const how =
    config.decrease.mode === 'multiplicative'
      ? `x${config.decrease.factor}`
      : `-${config.decrease.step}`;
  const from = base < cap ? ` of the ${base} per worker in flight at the peak` : ` of ${cap}`;
  return {
    kind: 'decrease',
    code: t.p99S === 'errors' ? 'upstream_errors' : 'above_band',
    reason: `${cause}: ${how}${from} -> ${next}`,
    cap: next,
  };
}

/** The state after `action`: a decrease starts the cooldown and the shrunken window. */
function nextState(
  previous: ControllerState,
  action: ControllerAction,
  peaks: number[],
  config: ControllerConfig,
): ControllerState {
  const decreased = action.kind === 'decrease';
  return {
    tick: action.tick,
    capPerWorker: action.capAfter,
    cooldownLeft: decreased ? config.cooldownTicks : Math.max(0, previous.cooldownLeft - 1),
    ticksSinceDecrease: decreased
      ? 0
      : previous.ticksSinceDecrease === null
        ? null
        : Math.min(previous.ticksSinceDecrease + 1, 1_000_000),
    peaks,
    actions: [...previous.actions, action].slice(-ACTION_HISTORY),
  };
}
