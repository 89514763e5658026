import {
  add,
  column,
  diag,
  identity,
  inverseSpd,
  type Matrix,
  multiply,
  subtract,
  symmetrize,
  transpose,
} from './matrix.js';
import {
  chainOccupancy,
  latencies,
  marginalWork,
  type Occupancy,
  type PodParams,
  type Workload,
} from './queueing-model.js';

/**
 * Extended Kalman filter over the pod's hidden parameters [alpha, beta, gamma]
 * (ms), observing [mean TTFT, mean ITL] (ms) of one period at that period's
 * arrival rate and mean token lengths. The measurement function is the queueing
 * model itself, so the filter and sizing share one TTFT definition and one queue.
 *
 * The issue's filter, in log coordinates:
 *   state    theta = ln x. Positivity is structural and relative errors are what
 *            Q, R and the bounds speak in anyway. Q = diag((0.05 x)^2) is
 *            diag(0.05^2) in theta; R = diag(((0.05/1.96) z)^2) is
 *            diag((0.05/1.96)^2) on ln z (both exact to first order).
 *   predict  identity transition, P += Q.
 *   update   Jacobian by central differences, step 1% of each parameter
 *            (+-0.01 in theta); NIS = y' S^-1 y with y and S at the predicted
 *            state; NIS >= 7.378 (chi-square, 2 dof, 95%) or a non-positive
 *            parameter rejects the update and restores state and covariance.
 *   bounds   each parameter is clamped to [0.01, 100] x its bootstrap value,
 *            fixed at bootstrap and stored with the state.
 *
 * What the issue leaves open, chosen here (docs/tuner.md has the measurements):
 *   - iterated EKF: the update is the Gauss-Newton maximum a posteriori step,
 *     relinearised at each new estimate with step halving on the MAP cost. The
 *     bootstrap can be an order of magnitude off in gamma; one linearisation at
 *     such a point overshoots, which then makes the NIS gate reject the
 *     observations that would correct it.
 *   - initial covariance from how the bootstrap is built (INITIAL_LOG_STD).
 */
export interface FilterState {
  /** Estimate [alpha, beta, gamma], ms. */
  x: [number, number, number];
  /** Covariance of ln x (relative errors): 0.01 is a 10% standard deviation. */
  P: Matrix;
  /** Bounds fixed at bootstrap, stored with the state (ms). */
  lower: [number, number, number];
  upper: [number, number, number];
  /** Accepted updates. */
  updates: number;
  /** Rejected updates, in total and since the last accepted one. */
  rejected: number;
  consecutiveRejections: number;
}

export interface Observation {
  ttftMs: number;
  itlMs: number;
  /** Requests started per second in the period. */
  rate: number;
  workload: Workload;
  /**
   * The pod's measured occupancy (the leader's gauge samples). The model's latencies are
   * then taken at it, so a pod held full by the gateway's queue is read as what it is; without
   * it, at the chain's occupancy for `rate` (Poisson arrivals, the pod's own queue).
   */
  occupancy?: Occupancy | undefined;
  /** Measured arrival-to-scheduling time (ms), replacing the model's wait + residual. */
  queueMs?: number | undefined;

  /** Standard deviation of ln TTFT and ln ITL (default MEASUREMENT_NOISE for both). */
  noise?: readonly [number, number] | undefined;
  /** Seconds since the previous update (default PROCESS_NOISE_PERIOD_S): scales Q. */
  elapsedS?: number | undefined;
}

/** The model's latencies for `params` as `obs` conditions them. */
export function predict(params: PodParams, obs: Observation) {
  const occupancy = obs.occupancy ?? chainOccupancy(params, obs.workload, obs.rate);
  return latencies(params, obs.workload, occupancy, obs.queueMs);
}

export interface UpdateResult {
  state: FilterState;
  accepted: boolean;
  /** Normalized innovation squared at the predicted state (NaN when not computed). */
  nis: number;
  reason?: 'nis' | 'non-positive' | 'invalid-observation' | 'singular';
  /** Gauss-Newton iterations the update took (0 when rejected before). */
  iterations: number;
}

export interface UpdateOptions {
  /** Relinearisations of the iterated EKF; 1 is the plain EKF. */
  maxIterations?: number;
  /**
   * What the NIS gate tests: 'map' (default) the MAP cost at the iterated estimate,
   * 'prior' y' S^-1 y linearised at the predicted state (the plain EKF's, always used
   * when maxIterations is 1). Kept for the comparison in docs/tuner.md.
   */
  gate?: 'map' | 'prior';
  /** Relative process noise per update (default the 0.05); for studies only. */
  processNoise?: number;
}

export const MAX_NIS = 7.378;
export const PROCESS_NOISE = 0.05;
/**
 * The parameters drift as a random walk of PROCESS_NOISE per this many seconds: Q per
 * update is PROCESS_NOISE^2 x elapsed / PROCESS_NOISE_PERIOD_S. At the default 60 s period
 * that is the Q per update; at 10 s periods a sixth of it, so the filter remembers
 * a minute of periods, not six (a run of saturated periods alone cannot tell alpha from
 * the batch's work, and would otherwise let alpha drift along that ridge).
 */
export const PROCESS_NOISE_PERIOD_S = 60;
export const MEASUREMENT_NOISE = 0.05 / 1.96;
export const JACOBIAN_STEP = 0.01;
export const MAX_ITERATIONS = 20;
/**
 * Initial standard deviation of ln alpha, ln beta, ln gamma around the bootstrap.
 * alpha = 0.9 ITL at light load is within about -10%..+20% of the truth (ITL is
 * alpha plus a little decode work, more if the period was not that light): 0.3.
 * beta + gamma comes from TTFT and is nearly all beta, but beta inherits alpha's
 * error through (TTFT - alpha)/i on short prompts: 0.5. gamma is the residual of
 * ITL after alpha and beta, a small difference of large numbers, easily 10x off
 * (14x for the light-load pod of the tests): 3. A looser alpha lets one
 * observation near saturation trade alpha against gamma along a curved ridge the
 * linearised covariance cannot see, and a tighter gamma makes the gate reject the
 * observations that would correct it; measured in docs/tuner.md.
 */
export const INITIAL_LOG_STD: readonly [number, number, number] = [0.3, 0.5, 3];

export const DEFAULT_PARAMS: PodParams = { alpha: 5, beta: 0.05, gamma: 0.00005 };

type Vector3 = [number, number, number];

export function toParams(x: readonly number[]): PodParams {
  return { alpha: x[0]!, beta: x[1]!, gamma: x[2]! };
}

/** gamma / beta the bootstrap assumes (gamma is the weakly identified one: its log std is 3). */
export const BOOTSTRAP_GAMMA_RATIO = 0.002;

/**
 * Starting estimate from one observation at its occupancy. With gamma = r beta the model
 * is nearly linear in alpha and beta:
 *   TTFT - queue = alpha + beta [n_bar d + (1 + r) i]
 *   ITL          = alpha + beta [c d + 1 + r (i + o/2)]
 * with d = delta / beta and c the others a token sees; solved as a linear system in a few
 * fixed-point rounds (c, and the queue when it is not measured, depend on the parameters). At light load (n_bar, c -> 0) this is the bootstrap
 * without its 0.9 ITL guess. A filter started afresh passes the ratio it had learned (a pod
 * that changed is mostly faster or slower, not of another shape). Falls back to
 * DEFAULT_PARAMS when a value comes out <= 0.
 */
export function bootstrap(obs: Observation, gammaRatio = BOOTSTRAP_GAMMA_RATIO): PodParams {
  const w = obs.workload;
  const i = w.inputTokens;
  const o = w.outputTokens;
  const r = gammaRatio > 0 && Number.isFinite(gammaRatio) ? gammaRatio : BOOTSTRAP_GAMMA_RATIO;
  const d = marginalWork({ alpha: 0, beta: 1, gamma: r }, w);
  let params: PodParams = { ...DEFAULT_PARAMS };
  for (let round = 0; round < 6; round++) {
    const l = predict(params, obs);
    // The companions a token sees, as the current parameters weigh the batch distribution.
    const delta = marginalWork(params, w);
    const companions = delta > 0 ? Math.max(0, (l.decodeIterationMs - params.alpha) / delta) : 0;
    const ttftCoef = l.meanBatch * d + (1 + r) * i;
    const itlCoef = companions * d + 1 + r * (i + o / 2);
    const beta = (obs.ttftMs - l.queueMs - obs.itlMs) / (ttftCoef - itlCoef);
    const alpha = obs.itlMs - beta * itlCoef;
    if (![alpha, beta].every((v) => Number.isFinite(v) && v > 0)) return { ...DEFAULT_PARAMS };
    params = { alpha, beta, gamma: r * beta };
  }
  return params;
}

/** The covariance a filter starts with (of ln x). */
export function initialCovariance(logStd: readonly number[] = INITIAL_LOG_STD): Matrix {
  return diag(logStd.map((s) => s * s));
}

export function initialState(
  start: PodParams,
  logStd: readonly number[] = INITIAL_LOG_STD,
): FilterState {
  const x: Vector3 = [start.alpha, start.beta, start.gamma];
  return {
    x,
    P: initialCovariance(logStd),
    lower: x.map((v) => v * 0.01) as Vector3,
    upper: x.map((v) => v * 100) as Vector3,
    updates: 0,
    rejected: 0,
    consecutiveRejections: 0,
  };
}

/** ln of the model's [TTFT, ITL] at theta = ln x. */
function measureLog(theta: readonly number[], obs: Observation): number[] {
  const r = predict(toParams(theta.map(Math.exp)), obs);
  return [Math.log(r.ttftMs), Math.log(r.itlMs)];
}

function jacobian(theta: readonly number[], obs: Observation): Matrix {
  const rows = 2;
  const H: Matrix = Array.from({ length: rows }, () => [0, 0, 0]);
  for (let j = 0; j < 3; j++) {
    const plus = [...theta];
    const minus = [...theta];
    plus[j] = theta[j]! + JACOBIAN_STEP;
    minus[j] = theta[j]! - JACOBIAN_STEP;
    const up = measureLog(plus, obs);
    const down = measureLog(minus, obs);
    for (let k = 0; k < rows; k++) H[k]![j] = (up[k]! - down[k]!) / (2 * JACOBIAN_STEP);
  }
  return H;
}

function validObservation(obs: Observation): boolean {
  const w = obs.workload;
  return (
    [obs.ttftMs, obs.itlMs, obs.rate, w.inputTokens, w.outputTokens].every(
      (v) => Number.isFinite(v) && v > 0,
    ) &&
    Number.isInteger(w.maxBatch) &&
    w.maxBatch >= 1 &&
    Number.isInteger(w.maxQueue) &&
    w.maxQueue >= 0 &&
    (obs.noise === undefined || obs.noise.every((v) => Number.isFinite(v) && v > 0)) &&
    (obs.elapsedS === undefined || (Number.isFinite(obs.elapsedS) && obs.elapsedS >= 0)) &&
    (obs.queueMs === undefined ||
      (Number.isFinite(obs.queueMs) && obs.queueMs >= 0 && obs.queueMs < obs.ttftMs)) &&
    (obs.occupancy === undefined ||
      [...obs.occupancy.batch, obs.occupancy.meanQueue, obs.occupancy.throughput].every(
        (v) => Number.isFinite(v) && v >= 0,
      ))
  );
}

/** One predict + update step. A rejected update returns the state unchanged but for counters. */
export function update(
  state: FilterState,
  obs: Observation,
  options: UpdateOptions = {},
): UpdateResult {
  const maxIterations = Math.max(1, options.maxIterations ?? MAX_ITERATIONS);
  const priorGate = maxIterations === 1 || options.gate === 'prior';
  if (!validObservation(obs)) return rejection(state, 'invalid-observation');

  const prediction = predictStep(state, obs, options.processNoise ?? PROCESS_NOISE);
  // Gate on the innovation at the predicted state.
  const linear = linearise(prediction);
  if (!linear) return rejection(state, 'singular');
  if (priorGate && !(linear.nis < MAX_NIS)) return rejection(state, 'nis', linear.nis);

  const problem: MapProblem = { ...prediction, PpInv: linear.PpInv, maxIterations };
  const best = mapEstimate(problem, linear.H, !priorGate);
  if (!best) return rejection(state, 'singular', linear.nis);
  const { theta, iterations } = best;
  // The gate. y' S^-1 y is the minimum over theta of the MAP cost when h is linear; with
  // the iterated update the gate takes that minimum itself (the cost at the estimate).
  // Linearised at a prior far from the truth the two differ wildly: a prior that predicts a
  // saturated pod has a flat TTFT, so S is small and y huge although a 1-sigma move of gamma
  // explains the observation.
  const nis = priorGate ? linear.nis : best.cost;
  if (!(nis < MAX_NIS)) return rejection(state, 'nis', nis, iterations);
  const next = theta.map(Math.exp) as Vector3;
  if (next.some((v) => !(v > 0) || !Number.isFinite(v))) {
    return rejection(state, 'non-positive', nis, iterations);
  }
  // The plain EKF's covariance comes from the linearisation at the prior (its gain exists:
  // the single Gauss-Newton step used it); the iterated one's from the estimate itself.
  const H = maxIterations > 1 ? jacobian(theta, obs) : linear.H;
  const K = kalmanGain(problem, H);
  if (!K) return rejection(state, 'singular', nis, iterations);
  return {
    state: {
      ...state,
      x: next,
      P: josephCovariance(problem, K, H),
      updates: state.updates + 1,
      consecutiveRejections: 0,
    },
    accepted: true,
    nis,
    iterations,
  };
}

/** A rejected update: the state unchanged but for its rejection counters. */
function rejection(
  state: FilterState,
  reason: NonNullable<UpdateResult['reason']>,
  nis = Number.NaN,
  iterations = 0,
): UpdateResult {
  return {
    state: {
      ...state,
      rejected: state.rejected + 1,
      consecutiveRejections: state.consecutiveRejections + 1,
    },
    accepted: false,
    nis,
    reason,
    iterations,
  };
}

/** The predicted state and the observation of one update, in log coordinates. */
interface Prediction {
  obs: Observation;
  /** ln x before the update, and the bounds of ln x. */
  prior: number[];
  lower: number[];
  upper: number[];
  /** Predicted covariance, P + Q. */
  Pp: Matrix;
  /** ln [TTFT, ITL] observed, its standard deviations and R. */
  z: number[];
  sigma: number[];
  R: Matrix;
}

/** The MAP problem the iterated update solves: the prediction, Pp^-1 and the iteration cap. */
interface MapProblem extends Prediction {
  PpInv: Matrix;
  maxIterations: number;
}

/** Predict: identity transition, Q = diag(q^2) on ln x per PROCESS_NOISE_PERIOD_S. */
function predictStep(state: FilterState, obs: Observation, q: number): Prediction {
  const elapsed = Math.max(0, obs.elapsedS ?? PROCESS_NOISE_PERIOD_S);
  const qq = (q * q * elapsed) / PROCESS_NOISE_PERIOD_S;
  const [noiseTtft, noiseItl] = obs.noise ?? [MEASUREMENT_NOISE, MEASUREMENT_NOISE];
  const sigma = [noiseTtft, noiseItl];
  return {
    obs,
    prior: state.x.map(Math.log),
    lower: state.lower.map(Math.log),
    upper: state.upper.map(Math.log),
    Pp: add(state.P, diag([qq, qq, qq])),
    z: [Math.log(obs.ttftMs), Math.log(obs.itlMs)],
    sigma,
    R: diag(sigma.map((v) => v * v)),
  };
}

/**
 * The linearisation at the predicted state: the Jacobian H, Pp^-1 and the NIS y' S^-1 y;
 * null when the model is not finite there or S or Pp is singular.
 */
function linearise(p: Prediction): { H: Matrix; PpInv: Matrix; nis: number } | null {
  const predicted = measureLog(p.prior, p.obs);
  if (!predicted.every(Number.isFinite)) return null;
  const H = jacobian(p.prior, p.obs);
  const S = add(multiply(multiply(H, p.Pp), transpose(H)), p.R);
  let Sinv: Matrix;
  let PpInv: Matrix;
  try {
    Sinv = inverseSpd(S);
    PpInv = inverseSpd(p.Pp);
  } catch {
    return null;
  }
  const y0 = column(p.z.map((v, k) => v - predicted[k]!));
  return { H, PpInv, nis: multiply(multiply(transpose(y0), Sinv), y0)[0]![0]! };
}

/** The MAP cost c(theta) = |theta - prior|^2_{Pp^-1} + |z - h(theta)|^2_{R^-1}. */
function mapCost(m: MapProblem, theta: readonly number[], h: readonly number[]): number {
  const d = column(theta.map((v, j) => v - m.prior[j]!));
  const prior2 = multiply(multiply(transpose(d), m.PpInv), d)[0]![0]!;
  let residual2 = 0;
  for (let k = 0; k < m.z.length; k++) residual2 += ((m.z[k]! - h[k]!) / m.sigma[k]!) ** 2;
  return prior2 + residual2;
}

function clampToBounds(m: MapProblem, theta: readonly number[]): number[] {
  return theta.map((v, j) => Math.min(m.upper[j]!, Math.max(m.lower[j]!, v)));
}

/** The Kalman gain Pp H' (H Pp H' + R)^-1; null when singular. */
function kalmanGain(m: Prediction, Hk: Matrix): Matrix | null {
  try {
    return multiply(
      multiply(m.Pp, transpose(Hk)),
      inverseSpd(add(multiply(multiply(Hk, m.Pp), transpose(Hk)), m.R)),
    );
  } catch {
    return null;
  }
}

/** Joseph form (I - KH) Pp (I - KH)' + K R K': keeps P symmetric and positive definite. */
function josephCovariance(m: Prediction, K: Matrix, H: Matrix): Matrix {
  const IKH = subtract(identity(3), multiply(K, H));
  return symmetrize(
    add(multiply(multiply(IKH, m.Pp), transpose(IKH)), multiply(multiply(K, m.R), transpose(K))),
  );
}

interface Estimate {
  theta: number[];
  cost: number;
  iterations: number;
}

/**
 * The MAP estimate by Gauss-Newton from the prior (`H` is the Jacobian there); null when a
 * linearisation is singular. With `restart`, a descent that ends at a cost the gate would
 * reject is retried from points around the prior.
 */
function mapEstimate(m: MapProblem, H: Matrix, restart: boolean): Estimate | null {
  let best = gaussNewton(m, m.prior, H);
  if (!best) return null;
  let iterations = best.iterations;
  if (restart && !(best.cost < MAX_NIS)) {
    // Gauss-Newton can stall where the prior predicts a saturated pod (flat TTFT, a
    // Jacobian that points nowhere useful). Before calling the observation an outlier,
    // restart from the prior moved 1 and 2 standard deviations along each parameter and
    // keep the lowest cost: the gate then tests the MAP cost, not where one descent stopped.
    for (const j of [0, 1, 2]) {
      for (const k of [-2, -1, 1, 2]) {
        const start = m.prior.map((v, i) => (i === j ? v + k * Math.sqrt(m.Pp[j]![j]!) : v));
        const tried = gaussNewton(m, clampToBounds(m, start));
        if (!tried) continue;
        iterations += tried.iterations;
        if (tried.cost < best.cost) best = tried;
      }
    }
  }
  return { theta: best.theta, cost: best.cost, iterations };
}

/**
 * Iterated update: Gauss-Newton on the MAP cost from `start`,
 *   theta_{k+1} = prior + K_k (z - h(theta_k) - H_k (prior - theta_k)),
 * with the step halved until the cost falls. `startJacobian` is H at `start` when known.
 * Null when a linearisation is singular.
 */
function gaussNewton(
  m: MapProblem,
  start: readonly number[],
  startJacobian?: Matrix,
): Estimate | null {
  let theta = [...start];
  let h = measureLog(theta, m.obs);
  if (!h.every(Number.isFinite)) return null;
  let current = mapCost(m, theta, h);
  let iterations = 0;
  while (iterations < m.maxIterations) {
    const Hk = iterations === 0 && startJacobian ? startJacobian : jacobian(theta, m.obs);
    const K = kalmanGain(m, Hk);
    if (!K) return null;
    iterations++;
    const hd = multiply(Hk, column(m.prior.map((v, j) => v - theta[j]!)));
    const innovation = column(m.z.map((v, k) => v - h[k]! - hd[k]![0]!));
    const dx = multiply(K, innovation);
    const target = m.prior.map((v, j) => v + dx[j]![0]!);
    if (m.maxIterations === 1) {
      theta = clampToBounds(m, target);
      h = measureLog(theta, m.obs);
      current = mapCost(m, theta, h);
      break;
    }
    const step = halvingStep(m, theta, target, current);
    if (!step) break;
    theta = step.theta;
    h = step.h;
    current = step.cost;
    if (step.largestStep < 1e-6) break;
  }
  return { theta, cost: current, iterations };
}

/**
 * The first of the steps 1, 1/2, 1/4 .. (above 1/1024) from `theta` toward `target` whose
 * cost is at most `current`; null when none is.
 */
function halvingStep(
  m: MapProblem,
  theta: readonly number[],
  target: readonly number[],
  current: number,
): { theta: number[]; h: number[]; cost: number; largestStep: number } | null {
  let stepScale = 1;
  while (stepScale > 1 / 1024) {
    const candidate = clampToBounds(
      m,
      theta.map((v, j) => v + stepScale * (target[j]! - v)),
    );
    const hc = measureLog(candidate, m.obs);
    const c = hc.every(Number.isFinite) ? mapCost(m, candidate, hc) : Number.POSITIVE_INFINITY;
    if (c <= current) {
      const largestStep = Math.max(...candidate.map((v, j) => Math.abs(v - theta[j]!)));
      return { theta: candidate, h: hc, cost: c, largestStep };
    }
    stepScale /= 2;
  }
  return null;
}

/** Standard deviation of ln x per parameter: the filter's own relative uncertainty. */
export function relativeStd(state: FilterState): Vector3 {
  return [0, 1, 2].map((j) => Math.sqrt(Math.max(0, state.P[j]![j]!))) as Vector3;
}
