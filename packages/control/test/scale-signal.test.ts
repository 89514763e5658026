import { describe, expect, it } from 'vitest';
import {
  INITIAL_SCALE_SIGNAL,
  nextScaleSignal,
  type ScaleSignalConfig,
  type ScaleSignalState,
} from '../src/tuner/scale-signal.js';

const config: ScaleSignalConfig = { downPeriods: 3, tolerance: 0.1, minPods: 1 };

/** The signal after each need, from the initial state. */
function run(needs: ReadonlyArray<number | null>, c = config): Array<number | null> {
  let state: ScaleSignalState = INITIAL_SCALE_SIGNAL;
  return needs.map((need) => {
    state = nextScaleSignal(state, need, c);
    return state.desired;
  });
}

/** Changes of direction in a series (up then down, or down then up). */
function reversals(series: ReadonlyArray<number | null>): number {
  let count = 0;
  let last = 0;
  for (let i = 1; i < series.length; i++) {
    const step = Math.sign((series[i] ?? 0) - (series[i - 1] ?? 0));
    if (step !== 0 && last !== 0 && step !== last) count++;
    if (step !== 0) last = step;
  }
  return count;
}

describe('nextScaleSignal', () => {
  it.each<[string, Array<number | null>, Array<number | null>, ScaleSignalConfig?]>([
    ['nothing sized yet holds null', [null, null], [null, null]],
    ['the first need sets it, rounded up', [2.2], [3]],
    ['an integer need is that many pods', [3, 3.0000000001], [3, 3]],
    ['up at once, by as much as needed', [2, 2, 5.5], [2, 2, 6]],
    ['a null period holds', [4, null, null], [4, 4, 4]],
    // With 10% headroom a need of 3 fits 4 pods, 4 fits 5, 2 fits 3.
    [
      'down after three periods with room, to the largest of them',
      [6, 3, 4, 2, 2],
      [6, 6, 6, 5, 5],
    ],
    ['a period without room restarts the count', [6, 3, 3, 5.5, 3, 3, 3], [6, 6, 6, 6, 6, 6, 4]],
    ['headroom: 2.8 pods does not release the third', [3, 2.8, 2.8, 2.8, 2.8], [3, 3, 3, 3, 3]],
    ['headroom: 2.6 pods does', [4, 2.6, 2.6, 2.6], [4, 4, 4, 3]],
    ['never below minPods', [2, 0, 0, 0, 0], [2, 2, 2, 1, 1]],
    ['minPods 0 allows none', [2, 0, 0, 0], [2, 2, 2, 0], { ...config, minPods: 0 }],
    ['one period suffices with downPeriods 1', [5, 1.5], [5, 2], { ...config, downPeriods: 1 }],
    ['a negative or infinite need holds', [3, -1, Number.POSITIVE_INFINITY], [3, 3, 3]],
  ])('%s', (_name, needs, expected, c) => {
    expect(run(needs, c)).toEqual(expected);
  });

  it('a need hovering at a boundary never flaps by one pod', () => {
    const needs = Array.from({ length: 40 }, (_, i) => (i % 2 === 0 ? 2.9 : 3.1));
    const series = run(needs);
    expect(new Set(series.slice(1))).toEqual(new Set([4]));
  });

  it('noisy needs around a level change direction rarely; a falling load is released with no reversal', () => {
    // Deterministic noise of ±8% around 4, then around 2.
    const noise = (i: number) => 1 + 0.08 * Math.sin(i * 12.9898);
    const around4 = Array.from({ length: 30 }, (_, i) => 4 * noise(i));
    const around2 = Array.from({ length: 30 }, (_, i) => 2 * noise(i + 30));
    const series = run([...around4, ...around2]);
    expect(reversals(series.slice(30))).toBe(0);
    expect(series.at(-1)).toBeLessThanOrEqual(3);
    expect(series.slice(0, 30).every((d) => d !== null && d >= 4)).toBe(true);
  });
});
