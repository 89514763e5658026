/**
 * The capacity tuner against the sim's own engine in virtual time (test/support/tuner-study/):
 * no processes, no clocks, many seeds in seconds.
 *
 *   npm run bench:tuner-harness -w @fairgate/loadtest -- [--seeds 20] [--period-s 10,30,60] [--pods 2]
 *   npm run bench:tuner-harness -w @fairgate/loadtest -- --shapes below,peaks,overload --seeds 40
 *
 * Default: the periods of bench:tuner, open loop; per period length, how many pods meet the
 * bounds after 10 periods (alpha within 10%, beta, gamma and lambda* within 15%) and the error
 * ranges. --shapes: production-like traffic (the gateway's cap and queue in front of each pod,
 * rates changing every 10 s period), 13 periods per pod, and a pod that restarts 2x slower.
 */
import { createRng } from '@fairgate/runtime';
import { TUNER_TRUTH as TRUTH, tunerPhases } from '@fairgate/testkit';
import { lambdaStar, learn, simulatePod } from '../../test/support/tuner-study/open-loop.js';
import { TRAFFIC_SHAPES, type TrafficShape } from '../../test/support/tuner-study/shapes.js';
import { studyShape, studySlowdown } from '../../test/support/tuner-study/study.js';
import { flag } from './harness/stack.js';

/** The accuracy bounds: alpha 10%, beta and gamma 15%, lambda* 15%. */
const BOUNDS = [0.1, 0.15, 0.15, 0.15];

/** Relative errors of alpha, beta, gamma and lambda* of every pod of every seed. */
function errorsOver(periodS: number, seeds: number, pods: number) {
  const trueLambda = lambdaStar(TRUTH);
  const errors: number[][] = [];
  const totals = { updates: 0, rejected: 0, resets: 0 };
  for (let seed = 1; seed <= seeds; seed++) {
    const rng = createRng(seed * 7919 + periodS);
    for (let pod = 0; pod < pods; pod++) {
      const r = learn(simulatePod(TRUTH, tunerPhases(), periodS, rng));
      totals.updates += r.updates;
      totals.rejected += r.rejected;
      totals.resets += r.resets;
      const p = r.params;
      errors.push(
        p
          ? [p.alpha / TRUTH.alpha - 1, p.beta / TRUTH.beta - 1, p.gamma / TRUTH.gamma - 1].concat(
              lambdaStar(p) / trueLambda - 1,
            )
          : [Number.NaN, Number.NaN, Number.NaN, Number.NaN],
      );
    }
  }
  return { errors, ...totals };
}

function study(periodS: number, seeds: number, pods: number): string {
  const { errors, updates, rejected, resets } = errorsOver(periodS, seeds, pods);
  const within = (e: number[], j: number) => Math.abs(e[j]!) <= BOUNDS[j]!;
  const count = (j: number) => errors.filter((e) => within(e, j)).length;
  const all = errors.filter((e) => BOUNDS.every((_, j) => within(e, j))).length;
  const range = (j: number) => {
    const v = errors.map((e) => e[j]!).filter(Number.isFinite);
    const pct = (x: number, digits = 0) => `${x >= 0 ? '+' : ''}${(100 * x).toFixed(digits)}`;
    const mean = v.reduce((a, b) => a + b, 0) / v.length;
    const sd = Math.sqrt(v.reduce((a, b) => a + (b - mean) ** 2, 0) / Math.max(1, v.length - 1));
    // The mean tells a bias of the model from the noise of the periods (the sd).
    return `${pct(Math.min(...v))}..${pct(Math.max(...v))}% (mean ${pct(mean, 1)}%, sd ${(100 * sd).toFixed(1)}%)`;
  };
  return (
    `period ${periodS} s: all four within ${all}/${errors.length}; alpha ${count(0)}, beta ${count(1)}, ` +
    `gamma ${count(2)}, lambda* ${count(3)}; updates ${updates}, rejected ${rejected}, resets ${resets}; ` +
    `errors alpha ${range(0)}, beta ${range(1)}, gamma ${range(2)}, lambda* ${range(3)}`
  );
}

const seeds = Number(flag('seeds') ?? 20);
const pods = Number(flag('pods') ?? 2);
const shapes = flag('shapes');
if (shapes) {
  for (const shape of shapes.split(',') as TrafficShape[]) {
    if (!TRAFFIC_SHAPES.includes(shape)) throw new Error(`unknown shape ${shape}`);
    console.log(studyShape(shape, seeds, pods));
  }
  console.log(studySlowdown('below', seeds, 6, pods));
} else {
  for (const periodS of (flag('period-s') ?? '10,30,60').split(',').map(Number)) {
    console.log(study(periodS, seeds, pods));
  }
}
