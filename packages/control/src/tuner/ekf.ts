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
  const reject = (
    reason: NonNullable<UpdateResult['reason']>,
    nis = Number.NaN,
    iterations = 0,
  ): UpdateResult => ({
    state: {
      ...state,
      rejected: state.rejected + 1,
      consecutiveRejections: state.consecutiveRejections + 1,
    },
    accepted: false,
    nis,
    reason,
    iterations,
  });
  if (!validObservation(obs)) return reject('invalid-observation');

  const prior = state.x.map(Math.log);
  const lower = state.lower.map(Math.log);
  const upper = state.upper.map(Math.log);
  // Predict: identity transition, Q = diag(0.05^2) on ln x.
  const q = options.processNoise ?? PROCESS_NOISE;
  const elapsed = Math.max(0, obs.elapsedS ?? PROCESS_NOISE_PERIOD_S);
  const qq = (q * q * elapsed) / PROCESS_NOISE_PERIOD_S;
  const Pp = add(state.P, diag([qq, qq, qq]));
  const [noiseTtft, noiseItl] = obs.noise ?? [MEASUREMENT_NOISE, MEASUREMENT_NOISE];
  const z = [Math.log(obs.ttftMs), Math.log(obs.itlMs)];
  const sigma = [noiseTtft, noiseItl];
  const R = diag(sigma.map((v) => v * v));
  const maxNis = MAX_NIS;

  // Gate on the innovation at the predicted state.
  const predicted = measureLog(prior, obs);
  if (!predicted.every(Number.isFinite)) return reject('singular');
  let H = jacobian(prior, obs);
  const S = add(multiply(multiply(H, Pp), transpose(H)), R);
  let Sinv: Matrix;
  let PpInv: Matrix;
  try {
    Sinv = inverseSpd(S);
    PpInv = inverseSpd(Pp);
  } catch {
    return reject('singular');
  }
  const y0 = column(z.map((v, k) => v - predicted[k]!));
  const linearNis = multiply(multiply(transpose(y0), Sinv), y0)[0]![0]!;
  if (priorGate && !(linearNis < maxNis)) return reject('nis', linearNis);

  // Iterated update: Gauss-Newton on the MAP cost
  //   c(theta) = |theta - prior|^2_{Pp^-1} + |z - h(theta)|^2_{R^-1},
  // theta_{k+1} = prior + K_k (z - h(theta_k) - H_k (prior - theta_k)), with the step
  // halved until the cost falls; the linearisation at the final estimate gives P.
  const cost = (theta: readonly number[], h: readonly number[]): number => {
    const d = column(theta.map((v, j) => v - prior[j]!));
    const prior2 = multiply(multiply(transpose(d), PpInv), d)[0]![0]!;
    let residual2 = 0;
    for (let k = 0; k < z.length; k++) residual2 += ((z[k]! - h[k]!) / sigma[k]!) ** 2;
    return prior2 + residual2;
  };
  const clamp = (theta: readonly number[]) =>
    theta.map((v, j) => Math.min(upper[j]!, Math.max(lower[j]!, v)));
  const gain = (Hk: Matrix): Matrix | null => {
    try {
      return multiply(
        multiply(Pp, transpose(Hk)),
        inverseSpd(add(multiply(multiply(Hk, Pp), transpose(Hk)), R)),
      );
    } catch {
      return null;
    }
  };
  /** Gauss-Newton from `start`; null when a linearisation is singular. */
  const solve = (start: readonly number[]) => {
    let theta = [...start];
    let h = measureLog(theta, obs);
    if (!h.every(Number.isFinite)) return null;
    let current = cost(theta, h);
    let iterations = 0;
    while (iterations < maxIterations) {
      const Hk = iterations === 0 && start === prior ? H : jacobian(theta, obs);
      const K = gain(Hk);
      if (!K) return null;
      iterations++;
      const hd = multiply(Hk, column(prior.map((v, j) => v - theta[j]!)));
      const innovation = column(z.map((v, k) => v - h[k]! - hd[k]![0]!));
      const dx = multiply(K, innovation);
      const target = prior.map((v, j) => v + dx[j]![0]!);
      if (maxIterations === 1) {
        theta = clamp(target);
        h = measureLog(theta, obs);
        current = cost(theta, h);
        break;
      }
      let stepScale = 1;
      let moved = false;
      let largestStep = 0;
      while (stepScale > 1 / 1024) {
        const candidate = clamp(theta.map((v, j) => v + stepScale * (target[j]! - v)));
        const hc = measureLog(candidate, obs);
        const c = hc.every(Number.isFinite) ? cost(candidate, hc) : Number.POSITIVE_INFINITY;
        if (c <= current) {
          largestStep = Math.max(...candidate.map((v, j) => Math.abs(v - theta[j]!)));
          theta = candidate;
          h = hc;
          current = c;
          moved = true;
          break;
        }
        stepScale /= 2;
      }
      if (!moved || largestStep < 1e-6) break;
    }
    return { theta, cost: current, iterations };
  };
  let best = solve(prior);
  if (!best) return reject('singular', linearNis);
  let iterations = best.iterations;
  if (!priorGate && !(best.cost < maxNis)) {
    // Gauss-Newton can stall where the prior predicts a saturated pod (flat TTFT, a
    // Jacobian that points nowhere useful). Before calling the observation an outlier,
    // restart from the prior moved 1 and 2 standard deviations along each parameter and
    // keep the lowest cost: the gate then tests the MAP cost, not where one descent stopped.
    for (const j of [0, 1, 2]) {
      for (const k of [-2, -1, 1, 2]) {
        const start = prior.map((v, i) => (i === j ? v + k * Math.sqrt(Pp[j]![j]!) : v));
        const tried = solve(clamp(start));
        if (!tried) continue;
        iterations += tried.iterations;
        if (tried.cost < best.cost) best = tried;
      }
    }
  }
  const theta = best.theta;
  const current = best.cost;
  let K: Matrix = gain(H)!;
  // The gate. y' S^-1 y is the minimum over theta of the MAP cost when h is linear; with
  // the iterated update the gate takes that minimum itself (the cost at the estimate).
  // Linearised at a prior far from the truth the two differ wildly: a prior that predicts a
  // saturated pod has a flat TTFT, so S is small and y huge although a 1-sigma move of gamma
  // explains the observation.
  const nis = priorGate ? linearNis : current;
  if (!(nis < maxNis)) return reject('nis', nis, iterations);
  const next = theta.map(Math.exp) as Vector3;
  if (next.some((v) => !(v > 0) || !Number.isFinite(v))) {
    return reject('non-positive', nis, iterations);
  }
  if (maxIterations > 1) {
    // Covariance from the linearisation at the estimate itself.
    H = jacobian(theta, obs);
    const Kt = gain(H);
    if (!Kt) return reject('singular', nis, iterations);
    K = Kt;
  }
  // Joseph form keeps P symmetric and positive definite.
  const IKH = subtract(identity(3), multiply(K, H));
  const P = symmetrize(
    add(multiply(multiply(IKH, Pp), transpose(IKH)), multiply(multiply(K, R), transpose(K))),
  );
  return {
    state: {
      ...state,
      x: next,
      P,
      updates: state.updates + 1,
      consecutiveRejections: 0,
    },
    accepted: true,
    nis,
    iterations,
  };
}

/** Standard deviation of ln x per parameter: the filter's own relative uncertainty. */
export function relativeStd(state: FilterState): Vector3 {
  return [0, 1, 2].map((j) => Math.sqrt(Math.max(0, state.P[j]![j]!))) as Vector3;
}
