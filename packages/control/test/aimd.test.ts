import { describe, expect, it } from 'vitest';
import { initialState, windowTicks } from '../src/aimd.js';
import { bucketOf, LARGEST_EDGE_S, OVERFLOW_INDEX } from '../src/histogram.js';
import {
  type ControllerConfig,
  type ControllerState,
  type Observation,
  step,
  windowSecondsToRead,
} from '../src/index.js';

/** Target 1 s, band +/-20% (0.8 .. 1.2 s), cap 10 per worker in [2, 20]. */
const CONFIG: ControllerConfig = {
  targetP99TtftS: 1,
  tickS: 1,
  windowS: 10,
  capPerWorker: 10,
  capPerWorkerMin: 2,
  capPerWorkerMax: 20,
  targetBandPct: 0.2,
  cooldownTicks: 3,
  decrease: { mode: 'multiplicative', factor: 0.75 },
  increaseStep: 1,
  minSamples: 10,
};

/**
 * `samples` TTFTs all at `seconds` (their p99 lies in that value's bucket); their service
 * TTFT (without the queue wait) at `serviceSeconds`, none recorded when omitted.
 */
function windowAt(
  seconds: number,
  samples = 100,
  errors = 0,
  serviceSeconds?: number,
): Observation['window'] {
  return {
    ttft: samples > 0 ? new Map([[bucketOf(seconds), samples]]) : new Map(),
    serviceTtft:
      samples > 0 && serviceSeconds !== undefined
        ? new Map([[bucketOf(serviceSeconds), samples]])
        : new Map(),
    errors,
  };
}

/** Two healthy pods, busy at the full budget (cap 10 x 2 = 20) unless overridden. */
function observe(overrides: Partial<Observation> = {}): Observation {
  return {
    window: windowAt(0.5),
    inflight: 20,
    waiting: 0,
    peakInflight: 20,
    healthyPods: 2,
    ...overrides,
  };
}

function stateWith(overrides: Partial<ControllerState> = {}): ControllerState {
  return { ...initialState(CONFIG), ...overrides };
}

const subtractive: ControllerConfig = { ...CONFIG, decrease: { mode: 'subtractive', step: 4 } };
const queueAware: ControllerConfig = { ...CONFIG, queueAware: true };

interface Case {
  name: string;
  state?: Partial<ControllerState>;
  observation?: Partial<Observation>;
  config?: ControllerConfig;
  kind: 'increase' | 'decrease' | 'hold';
  code: string;
  cap: number;
  budget: number;
  cooldownLeft?: number;
}

const CASES: Case[] = [
  // Increase only under demand, when the pool is using its budget.
  {
    name: 'increase under demand (in flight at the budget)',
    kind: 'increase',
    code: 'below_band',
    cap: 11,
    budget: 22,
  },
  {
    name: 'increase with in-flight demand and an empty queue (trap 3: in-flight is demand)',
    observation: { inflight: 12, waiting: 0, peakInflight: 12 },
    kind: 'increase',
    code: 'below_band',
    cap: 11,
    budget: 22,
  },
  {
    name: 'increase with only a queue',
    observation: { inflight: 0, waiting: 3, peakInflight: 10 },
    kind: 'increase',
    code: 'below_band',
    cap: 11,
    budget: 22,
  },
  {
    name: 'hold without demand (nothing in flight or waiting)',
    observation: { inflight: 0, waiting: 0 },
    kind: 'hold',
    code: 'no_demand',
    cap: 10,
    budget: 20,
  },
  {
    name: 'hold when app-limited (window peak 9 < half of budget 20)',
    observation: { inflight: 5, peakInflight: 9 },
    kind: 'hold',
    code: 'app_limited',
    cap: 10,
    budget: 20,
  },
  {
    name: 'an earlier tick of the window reached half the budget: not app-limited',
    state: { peaks: [3, 10, 4] },
    observation: { inflight: 5, peakInflight: 5 },
    kind: 'increase',
    code: 'below_band',
    cap: 11,
    budget: 22,
  },
  {
    name: 'a peak older than the window does not count',
    state: { peaks: [10, 1, 1, 1, 1, 1, 1, 1, 1, 1] },
    observation: { inflight: 5, peakInflight: 5 },
    kind: 'hold',
    code: 'app_limited',
    cap: 10,
    budget: 20,
  },
  // Decrease above the band, both modes.
  {
    name: 'decrease above the band, multiplicative x0.75',
    observation: { window: windowAt(2) },
    kind: 'decrease',
    code: 'above_band',
    cap: 7,
    budget: 14,
    cooldownLeft: 3,
  },
  {
    name: 'decrease above the band, subtractive -4',
    config: subtractive,
    observation: { window: windowAt(2) },
    kind: 'decrease',
    code: 'above_band',
    cap: 6,
    budget: 12,
    cooldownLeft: 3,
  },
  {
    name: 'decrease starts from the per-worker peak in flight when the budget was not used',
    state: { capPerWorker: 20 },
    observation: { window: windowAt(2), inflight: 16, peakInflight: 16 },
    kind: 'decrease',
    code: 'above_band',
    cap: 6,
    budget: 12,
    cooldownLeft: 3,
  },
  // Deadband.
  {
    name: 'hold inside the band (p99 = target)',
    observation: { window: windowAt(1) },
    kind: 'hold',
    code: 'in_band',
    cap: 10,
    budget: 20,
  },
  {
    name: 'hold inside the band near its low end',
    observation: { window: windowAt(0.85) },
    kind: 'hold',
    code: 'in_band',
    cap: 10,
    budget: 20,
  },
  {
    name: 'hold inside the band near its high end',
    observation: { window: windowAt(1.12) },
    kind: 'hold',
    code: 'in_band',
    cap: 10,
    budget: 20,
  },
  // Clamps.
  {
    name: 'clamp at max: hold',
    state: { capPerWorker: 20 },
    observation: { peakInflight: 40 },
    kind: 'hold',
    code: 'at_max',
    cap: 20,
    budget: 40,
  },
  {
    name: 'clamp at max: a large step stops at max',
    config: { ...CONFIG, increaseStep: 5 },
    state: { capPerWorker: 18 },
    observation: { peakInflight: 36 },
    kind: 'increase',
    code: 'below_band',
    cap: 20,
    budget: 40,
  },
  {
    name: 'clamp at min: hold',
    state: { capPerWorker: 2 },
    observation: { window: windowAt(3), peakInflight: 4 },
    kind: 'hold',
    code: 'at_min',
    cap: 2,
    budget: 4,
    cooldownLeft: 0,
  },
  {
    name: 'clamp at min: a subtractive step stops at min',
    config: subtractive,
    state: { capPerWorker: 5 },
    observation: { window: windowAt(3), peakInflight: 10 },
    kind: 'decrease',
    code: 'above_band',
    cap: 2,
    budget: 4,
    cooldownLeft: 3,
  },
  {
    name: 'a stored cap above a lowered max is clamped first',
    config: { ...CONFIG, capPerWorkerMax: 8 },
    state: { capPerWorker: 15 },
    observation: { window: windowAt(1) },
    kind: 'hold',
    code: 'in_band',
    cap: 8,
    budget: 16,
  },
  // Too little signal.
  {
    name: 'hold with fewer than min_samples',
    observation: { window: windowAt(5, 9) },
    kind: 'hold',
    code: 'few_samples',
    cap: 10,
    budget: 20,
  },
  {
    name: 'empty window after idle (p99 NaN): hold',
    observation: { window: windowAt(0, 0), inflight: 0, peakInflight: 0 },
    kind: 'hold',
    code: 'few_samples',
    cap: 10,
    budget: 20,
  },
  // Overflow bucket: clamps to the largest finite edge, which is far above any band.
  {
    name: 'overflow bucket: p99 clamps to the largest edge and decreases',
    observation: {
      window: { ttft: new Map([[OVERFLOW_INDEX, 50]]), serviceTtft: new Map(), errors: 0 },
    },
    kind: 'decrease',
    code: 'above_band',
    cap: 7,
    budget: 14,
    cooldownLeft: 3,
  },
  // Upstream errors and timeouts.
  {
    name: 'error-driven decrease: 2 failures in 102 requests are more than the top 1%',
    observation: { window: windowAt(0.5, 100, 2) },
    kind: 'decrease',
    code: 'upstream_errors',
    cap: 7,
    budget: 14,
    cooldownLeft: 3,
  },
  {
    name: 'one failure in 201 is inside the top 1%: no decrease',
    observation: { window: windowAt(0.5, 200, 1) },
    kind: 'increase',
    code: 'below_band',
    cap: 11,
    budget: 22,
  },
  {
    name: 'failures alone count as samples',
    observation: { window: windowAt(0, 0, 10), inflight: 4, peakInflight: 20 },
    kind: 'decrease',
    code: 'upstream_errors',
    cap: 7,
    budget: 14,
    cooldownLeft: 3,
  },
  // Pods.
  {
    name: 'no healthy pods: hold with budget 0',
    observation: { healthyPods: 0 },
    kind: 'hold',
    code: 'no_healthy_pods',
    cap: 10,
    budget: 0,
  },
  {
    name: 'budget is cap x healthy pods',
    observation: { healthyPods: 3, peakInflight: 30 },
    kind: 'increase',
    code: 'below_band',
    cap: 11,
    budget: 33,
  },
  // Cooldown holds everything, even a p99 far above the band.
  {
    name: 'cooldown holds a high p99',
    state: { cooldownLeft: 2, ticksSinceDecrease: 0 },
    observation: { window: windowAt(5) },
    kind: 'hold',
    code: 'cooldown',
    cap: 10,
    budget: 20,
    cooldownLeft: 1,
  },
  // Queue-aware: above the band on queue wait alone increases instead (p99 3 s, band 0.8-1.2 s).
  {
    name: "queue-aware: above the band, the pods' own p99 below the floor: increase",
    config: queueAware,
    observation: { window: windowAt(3, 100, 0, 0.5) },
    kind: 'increase',
    code: 'queue_bound',
    cap: 11,
    budget: 22,
    cooldownLeft: 0,
  },
  {
    name: "queue-aware: above the band, the pods' own p99 between the floor and the target: hold",
    config: queueAware,
    observation: { window: windowAt(3, 100, 0, 0.9) },
    kind: 'hold',
    code: 'pods_in_band',
    cap: 10,
    budget: 20,
    cooldownLeft: 0,
  },
  {
    name: "queue-aware: above the band, the pods' own p99 at the floor: hold",
    config: queueAware,
    observation: { window: windowAt(3, 100, 0, 0.8) },
    kind: 'hold',
    code: 'pods_in_band',
    cap: 10,
    budget: 20,
  },
  {
    name: "queue-aware: the pods' own p99 in the band's upper half: decrease as usual",
    config: queueAware,
    observation: { window: windowAt(3, 100, 0, 1.1) },
    kind: 'decrease',
    code: 'above_band',
    cap: 7,
    budget: 14,
    cooldownLeft: 3,
  },
  {
    name: "queue-aware: the pods' own p99 above the band: decrease as usual",
    config: queueAware,
    observation: { window: windowAt(3, 100, 0, 2) },
    kind: 'decrease',
    code: 'above_band',
    cap: 7,
    budget: 14,
  },
  {
    name: 'queue-aware off: pods in the band still decrease',
    observation: { window: windowAt(3, 100, 0, 0.9) },
    kind: 'decrease',
    code: 'above_band',
    cap: 7,
    budget: 14,
  },
  {
    name: 'queue-aware: queue-bound but app-limited (peak under half the budget): hold',
    config: queueAware,
    observation: { window: windowAt(3, 100, 0, 0.5), inflight: 5, peakInflight: 5 },
    kind: 'hold',
    code: 'app_limited',
    cap: 10,
    budget: 20,
  },
  {
    name: 'queue-aware: queue-bound at the maximum cap: hold',
    config: queueAware,
    state: { capPerWorker: 20 },
    observation: { window: windowAt(3, 100, 0, 0.5), inflight: 40, peakInflight: 40 },
    kind: 'hold',
    code: 'at_max',
    cap: 20,
    budget: 40,
  },
  {
    name: 'queue-aware off: the same queue-bound window decreases',
    observation: { window: windowAt(3, 100, 0, 0.5) },
    kind: 'decrease',
    code: 'above_band',
    cap: 7,
    budget: 14,
  },
  {
    name: 'queue-aware without service samples (a replica that does not record them): decrease',
    config: queueAware,
    observation: { window: windowAt(3) },
    kind: 'decrease',
    code: 'above_band',
    cap: 7,
    budget: 14,
  },
  {
    name: 'queue-aware: failures making up the top 1% still decrease',
    config: queueAware,
    observation: { window: windowAt(0.5, 10, 5, 0.1) },
    kind: 'decrease',
    code: 'upstream_errors',
    cap: 7,
    budget: 14,
  },
  {
    name: "queue-aware: p99 inside the band, the pods' own p99 below the floor: increase",
    config: queueAware,
    observation: { window: windowAt(1, 100, 0, 0.1) },
    kind: 'increase',
    code: 'queue_bound',
    cap: 11,
    budget: 22,
  },
  {
    name: "queue-aware: p99 inside the band, the pods' own p99 inside it too: hold",
    config: queueAware,
    observation: { window: windowAt(1, 100, 0, 0.9) },
    kind: 'hold',
    code: 'in_band',
    cap: 10,
    budget: 20,
  },
  {
    name: 'queue-aware: p99 below the band: the usual increase',
    config: queueAware,
    observation: { window: windowAt(0.5, 100, 0, 0.1) },
    kind: 'increase',
    code: 'below_band',
    cap: 11,
    budget: 22,
  },
  {
    name: 'queue-aware: cooldown still holds a queue-bound window',
    config: queueAware,
    state: { cooldownLeft: 2, ticksSinceDecrease: 0 },
    observation: { window: windowAt(3, 100, 0, 0.5) },
    kind: 'hold',
    code: 'cooldown',
    cap: 10,
    budget: 20,
  },
];

describe('AIMD step', () => {
  it.each(CASES)('$name', (c) => {
    const { state, action } = step(stateWith(c.state), observe(c.observation), c.config ?? CONFIG);
    expect([action.kind, action.code, action.capAfter, action.budget]).toEqual([
      c.kind,
      c.code,
      c.cap,
      c.budget,
    ]);
    expect(state.capPerWorker).toBe(c.cap);
    expect(state.tick).toBe((c.state?.tick ?? 0) + 1);
    expect(state.actions.at(-1)).toEqual(action);
    expect(action.reason.length).toBeGreaterThan(10);
    if (c.cooldownLeft !== undefined) expect(state.cooldownLeft).toBe(c.cooldownLeft);
    if (c.kind === 'decrease') expect(state.ticksSinceDecrease).toBe(0);
  });

  it('reports p99 in seconds, null for an empty window and "errors" when failures dominate', () => {
    const p99 = step(stateWith(), observe({ window: windowAt(0.5) }), CONFIG).action.p99S;
    expect(typeof p99 === 'number' && Math.abs(p99 - 0.5) / 0.5 < 0.05).toBe(true);
    expect(step(stateWith(), observe({ window: windowAt(0, 0) }), CONFIG).action.p99S).toBeNull();
    expect(step(stateWith(), observe({ window: windowAt(0.5, 10, 5) }), CONFIG).action.p99S).toBe(
      'errors',
    );
    const overflow = observe({
      window: { ttft: new Map([[OVERFLOW_INDEX, 20]]), serviceTtft: new Map(), errors: 0 },
    });
    expect(step(stateWith(), overflow, CONFIG).action.p99S).toBe(LARGEST_EDGE_S);
  });

  it('cooldown follows a decrease (3 held ticks) but not an increase', () => {
    const high = observe({ window: windowAt(3) });
    let state = stateWith({ capPerWorker: 20 });
    const kinds: string[] = [];
    const caps: number[] = [];
    for (let i = 0; i < 5; i += 1) {
      const result = step(state, { ...high, peakInflight: 40 }, CONFIG);
      state = result.state;
      kinds.push(result.action.kind);
      caps.push(result.action.capAfter);
    }
    expect(kinds).toEqual(['decrease', 'hold', 'hold', 'hold', 'decrease']);
    expect(caps).toEqual([15, 15, 15, 15, 11]);

    let rising = stateWith();
    const climb: number[] = [];
    for (let i = 0; i < 4; i += 1) {
      const cap = rising.capPerWorker;
      const result = step(rising, observe({ peakInflight: cap * 2 }), CONFIG);
      rising = result.state;
      climb.push(result.action.capAfter);
      expect(result.state.cooldownLeft).toBe(0);
    }
    expect(climb).toEqual([11, 12, 13, 14]);
  });

  it('keeps the last window of tick peaks and the last 32 actions', () => {
    let state = stateWith();
    for (let i = 1; i <= 40; i += 1)
      state = step(state, observe({ peakInflight: i }), CONFIG).state;
    expect(state.peaks).toEqual([31, 32, 33, 34, 35, 36, 37, 38, 39, 40]);
    expect(state.peaks.length).toBe(windowTicks(CONFIG));
    expect(state.actions.length).toBe(32);
    expect(state.actions[0]?.tick).toBe(9);
    expect(state.tick).toBe(40);
  });
});

describe('window read after a decrease', () => {
  it.each([
    ['no decrease remembered: the whole window', { ticksSinceDecrease: null }, CONFIG, 10],
    ['first tick after the decrease: two seconds at least', { ticksSinceDecrease: 0 }, CONFIG, 2],
    ['4 ticks of 1 s since: 4 s', { ticksSinceDecrease: 3 }, CONFIG, 4],
    ['long ago: the whole window', { ticksSinceDecrease: 50 }, CONFIG, 10],
    [
      '5 s ticks after a 3-tick cooldown: 20 of 30 s',
      { ticksSinceDecrease: 3 },
      { ...CONFIG, tickS: 5, windowS: 30 },
      20,
    ],
    [
      '0.5 s ticks, 7 ticks since: 3 s',
      { ticksSinceDecrease: 6 },
      { ...CONFIG, tickS: 0.5, windowS: 3 },
      3,
    ],
    ['a 1 s window is never exceeded', { ticksSinceDecrease: 0 }, { ...CONFIG, windowS: 1 }, 1],
  ] as const)('%s', (_name, state, config, seconds) => {
    expect(windowSecondsToRead(stateWith(state), config)).toBe(seconds);
  });
});
