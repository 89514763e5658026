import {
  add,
  column,
  diag,
  identity,
  inverse2,
  type Matrix,
  multiply,
  subtract,
  transpose,
} from './matrix.js';
import { analyze, type PodParams, type Workload } from './queueing-model.js';

/**
 * Extended Kalman filter over the pod's hidden parameters x = [alpha, beta,
 * gamma] (ms), observing z = [mean TTFT, mean ITL] (ms) of one period at that
 * period's arrival rate and mean token lengths. The measurement function is
 * the queueing model itself (same TTFT definition as sizing uses).
 *   predict: identity transition, P += Q, Q = diag((0.05 x)^2)
 *   update:  R = diag(((0.05/1.96) z)^2), H by central differences (1% step),
 *            rejected when NIS >= 7.378 (chi-square 2 dof, 95%) or any
 *            parameter <= 0: state and covariance are restored.
 *   bounds:  each parameter is clamped to [0.01, 100] x its bootstrap value.
 */
export interface FilterState {
  x: [number, number, number];
  P: Matrix;
  /** Bounds fixed at bootstrap, stored with the state. */
  lower: [number, number, number];
  upper: [number, number, number];
  updates: number;
  rejected: number;
}

export interface Observation {
  ttftMs: number;
  itlMs: number;
  /** Arrival rate of the period, requests/s. */
  rate: number;
  workload: Workload;
}

export interface UpdateResult {
  state: FilterState;
  accepted: boolean;
  nis: number;
  reason?: 'nis' | 'non-positive' | 'invalid-observation' | 'singular';
}

export const MAX_NIS = 7.378;
const PROCESS_NOISE = 0.05;
const MEASUREMENT_NOISE = 0.05 / 1.96;
const JACOBIAN_STEP = 0.01;
/**
 * Initial standard deviation of each parameter, relative to the bootstrap. The
 * bootstrap assumes T_iter = alpha at light load and takes alpha = 0.9 ITL, so
 * gamma (a small term of ITL) can start an order of magnitude off: a tight prior
 * would make the NIS gate reject the very observations that correct it.
 */
const INITIAL_STD = 1.0;

export const DEFAULT_PARAMS: PodParams = { alpha: 5, beta: 0.05, gamma: 0.00005 };

export function toParams(x: readonly number[]): PodParams {
  return { alpha: x[0]!, beta: x[1]!, gamma: x[2]! };
}

/**
 * Starting estimate from one light-load observation (T_iter ~ alpha):
 * alpha = 0.9 ITL; beta+gamma = (TTFT - alpha)/i; gamma from the ITL equation.
 * Falls back to DEFAULT_PARAMS when any value comes out <= 0.
 */
export function bootstrap(obs: Pick<Observation, 'ttftMs' | 'itlMs' | 'workload'>): PodParams {
  const i = obs.workload.inputTokens;
  const o = obs.workload.outputTokens;
  const alpha = 0.9 * obs.itlMs;
  const betaPlusGamma = (obs.ttftMs - alpha) / i;
  const gamma = (obs.itlMs - alpha - betaPlusGamma) / (i + (o + 1) / 2 - 1);
  const beta = betaPlusGamma - gamma;
  const values = [alpha, beta, gamma];
  if (values.some((v) => !Number.isFinite(v) || v <= 0)) return { ...DEFAULT_PARAMS };
  return { alpha, beta, gamma };
}

export function initialState(start: PodParams): FilterState {
  const x: [number, number, number] = [start.alpha, start.beta, start.gamma];
  return {
    x,
    P: diag(x.map((v) => (INITIAL_STD * v) ** 2)),
    lower: x.map((v) => v * 0.01) as [number, number, number],
    upper: x.map((v) => v * 100) as [number, number, number],
    updates: 0,
    rejected: 0,
  };
}

function measure(x: readonly number[], obs: Observation): [number, number] {
  const r = analyze(toParams(x), obs.workload, obs.rate);
  return [r.ttftMs, r.itlMs];
}

function jacobian(x: readonly number[], obs: Observation): Matrix {
  const H: Matrix = [
    [0, 0, 0],
    [0, 0, 0],
  ];
  for (let j = 0; j < 3; j++) {
    const h = x[j]! * JACOBIAN_STEP;
    const plus = [...x];
    const minus = [...x];
    plus[j] = x[j]! + h;
    minus[j] = x[j]! - h;
    const up = measure(plus, obs);
    const down = measure(minus, obs);
    H[0]![j] = (up[0] - down[0]) / (2 * h);
    H[1]![j] = (up[1] - down[1]) / (2 * h);
  }
  return H;
}

export function update(state: FilterState, obs: Observation): UpdateResult {
  const reject = (reason: UpdateResult['reason'], nis = Number.NaN): UpdateResult => ({
    state: { ...state, rejected: state.rejected + 1 },
    accepted: false,
    nis,
    reason,
  });
  if (![obs.ttftMs, obs.itlMs, obs.rate].every((v) => Number.isFinite(v) && v > 0)) {
    return reject('invalid-observation');
  }
  // Predict.
  const Q = diag(state.x.map((v) => (PROCESS_NOISE * v) ** 2));
  const Pp = add(state.P, Q);
  // Update.
  const z = [obs.ttftMs, obs.itlMs];
  const predicted = measure(state.x, obs);
  const y = column([z[0]! - predicted[0], z[1]! - predicted[1]]);
  const H = jacobian(state.x, obs);
  const R = diag(z.map((v) => (MEASUREMENT_NOISE * v) ** 2));
  const S = add(multiply(multiply(H, Pp), transpose(H)), R);
  let Sinv: Matrix;
  try {
    Sinv = inverse2(S);
  } catch {
    return reject('singular');
  }
  const nis = multiply(multiply(transpose(y), Sinv), y)[0]![0]!;
  if (!(nis < MAX_NIS)) return reject('nis', nis);
  const K = multiply(multiply(Pp, transpose(H)), Sinv);
  const dx = multiply(K, y);
  const next = state.x.map((v, j) => v + dx[j]![0]!);
  if (next.some((v) => !(v > 0))) return reject('non-positive', nis);
  const clamped = next.map((v, j) => Math.min(state.upper[j]!, Math.max(state.lower[j]!, v))) as [
    number,
    number,
    number,
  ];
  // Joseph form keeps P symmetric and positive definite.
  const IKH = subtract(identity(3), multiply(K, H));
  const P = add(
    multiply(multiply(IKH, Pp), transpose(IKH)),
    multiply(multiply(K, R), transpose(K)),
  );
  return {
    state: { ...state, x: clamped, P, updates: state.updates + 1 },
    accepted: true,
    nis,
  };
}
