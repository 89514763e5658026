import { describe, expect, it } from 'vitest';
import { initialState } from '../src/aimd.js';
import { bucketOf } from '../src/histogram.js';
import {
  type ControllerConfig,
  decodeState,
  decodeWindow,
  encodeState,
  encodeWindow,
  step,
  summarizeWindow,
} from '../src/index.js';
import { STATE_VERSION } from '../src/state-codec.js';
import { ERROR_COUNT_INDEX, emptyWindow, SERVICE_INDEX_OFFSET } from '../src/window.js';

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

function someState() {
  let state = initialState(CONFIG);
  const busy = {
    window: { ttft: new Map([[bucketOf(0.3), 50]]), serviceTtft: new Map(), errors: 0 },
    inflight: 20,
    waiting: 2,
    peakInflight: 22,
    healthyPods: 2,
  };
  state = step(state, busy, CONFIG).state;
  state = step(
    state,
    { ...busy, window: { ttft: new Map([[bucketOf(4), 50]]), serviceTtft: new Map(), errors: 0 } },
    CONFIG,
  ).state;
  return state;
}

describe('controller state codec', () => {
  it('round-trips the state and names the writer', () => {
    const state = someState();
    const text = encodeState(state, { replica: 'r1', epoch: 7 });
    expect(decodeState(text, CONFIG)).toEqual({ state, writer: { replica: 'r1', epoch: 7 } });
  });

  it('absent: the initial state, no problem', () => {
    expect(decodeState(null, CONFIG)).toEqual({ state: initialState(CONFIG), writer: null });
  });

  it('clamps a stored cap into the current bounds and cooldown to the current length', () => {
    const text = encodeState(
      { ...someState(), capPerWorker: 19, cooldownLeft: 3 },
      { replica: 'r', epoch: 1 },
    );
    const decoded = decodeState(text, { ...CONFIG, capPerWorkerMax: 12, cooldownTicks: 1 });
    expect([decoded.state.capPerWorker, decoded.state.cooldownLeft]).toEqual([12, 1]);
  });

  it.each([
    ['not JSON', '{', /not JSON/],
    ['not an object', '42', /not an object/],
    ['another version', JSON.stringify({ version: STATE_VERSION + 1, state: {} }), /version 2/],
    [
      'a bad cap',
      JSON.stringify({
        version: STATE_VERSION,
        state: { ...initialState(CONFIG), capPerWorker: -3 },
      }),
      /bad fields/,
    ],
    [
      'a bad peak',
      JSON.stringify({
        version: STATE_VERSION,
        state: { ...initialState(CONFIG), peaks: [1, 'x'] },
      }),
      /bad fields/,
    ],
    [
      'a malformed action',
      JSON.stringify({
        version: STATE_VERSION,
        state: { ...initialState(CONFIG), actions: [{ tick: 1, kind: 'jump' }] },
      }),
      /action is malformed/,
    ],
  ])('%s: the initial state, with the problem', (_name, text, problem) => {
    const decoded = decodeState(text, CONFIG);
    expect(decoded.state).toEqual(initialState(CONFIG));
    expect(decoded.problem).toMatch(problem);
  });
});

describe('window counts', () => {
  it('carry TTFT and service TTFT buckets and the failure count in one map, unknown indices ignored', () => {
    const window = {
      ttft: new Map([[bucketOf(0.2), 3]]),
      serviceTtft: new Map([[bucketOf(0.05), 3]]),
      errors: 2,
    };
    const flat = encodeWindow(window);
    expect(flat.get(ERROR_COUNT_INDEX)).toBe(2);
    expect(flat.get(bucketOf(0.05) + SERVICE_INDEX_OFFSET)).toBe(3);
    flat.set(999_999, 5);
    flat.set(SERVICE_INDEX_OFFSET - 1, 5);
    expect(decodeWindow(flat)).toEqual(window);
    expect(encodeWindow(emptyWindow())).toEqual(new Map());
  });

  it('summarize: samples, failures, and p99 with failures slower than any TTFT', () => {
    expect(summarizeWindow(emptyWindow())).toEqual({
      samples: 0,
      errors: 0,
      p99S: Number.NaN,
      serviceP99S: Number.NaN,
    });
    expect(summarizeWindow({ ...emptyWindow(), errors: 1 }).p99S).toBe(Number.POSITIVE_INFINITY);
    const mixed = summarizeWindow({
      ttft: new Map([[bucketOf(0.2), 99]]),
      serviceTtft: new Map([[bucketOf(0.05), 99]]),
      errors: 1,
    });
    expect(mixed.p99S).toBeGreaterThan(0.19);
    expect(mixed.p99S).toBeLessThan(0.21);
    // Failures never reached a pod: the service p99 is over the samples alone.
    expect(mixed.serviceP99S).toBeGreaterThan(0.047);
    expect(mixed.serviceP99S).toBeLessThan(0.053);
  });
});
