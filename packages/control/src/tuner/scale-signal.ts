/**
 * desired_pods as a scaling signal (fairgate_desired_pods, which KEDA or the load
 * scenario's scaler acts on): the capacity report's pods needed, made stable.
 *
 * - Up at once: the period's need, rounded up, above the signal raises it to that need.
 * - Down only with room and time: a period counts toward scaling down when its need, with
 *   `tolerance` of headroom (need / (1 - tolerance), rounded up), is below the signal;
 *   after `downPeriods` such periods in a row the signal falls to the largest of them. Any
 *   other period starts the count again.
 * - Never below `minPods`: with no pod there is no traffic to size from.
 *
 * So a need hovering at a boundary (2.9, 3.1, 2.9, ...) holds the signal instead of
 * flapping by one pod every period, and a falling load is released in steps no more
 * often than every `downPeriods`, each step a size the recent periods all fit in.
 */
export interface ScaleSignalConfig {
  /** Consecutive periods with room before the signal falls (>= 1). */
  downPeriods: number;
  /** Headroom a smaller size must leave, as a fraction of it ([0, 1)). */
  tolerance: number;
  /** The smallest signal. */
  minPods: number;
}

export interface ScaleSignalState {
  /** The signal; null before the first sized period. */
  readonly desired: number | null;
  /** The headroom-rounded needs of the periods in the current run of smaller ones. */
  readonly smaller: readonly number[];
}

export const INITIAL_SCALE_SIGNAL: ScaleSignalState = { desired: null, smaller: [] };

/**
 * The next signal from a period's need in pods (fractional: observed rate / lambda*), or
 * null when the period could not size anything (the signal holds).
 */
export function nextScaleSignal(
  state: ScaleSignalState,
  need: number | null,
  config: ScaleSignalConfig,
): ScaleSignalState {
  if (need === null || !Number.isFinite(need) || need < 0) return state;
  // A need within rounding noise of an integer is that integer (1.0000000002 pods is 1).
  const up = Math.max(config.minPods, Math.ceil(need - 1e-9));
  if (state.desired === null || up > state.desired) return { desired: up, smaller: [] };
  const withRoom = Math.max(config.minPods, Math.ceil(need / (1 - config.tolerance) - 1e-9));
  if (withRoom >= state.desired) return { desired: state.desired, smaller: [] };
  const smaller = [...state.smaller, withRoom];
  if (smaller.length < config.downPeriods) return { desired: state.desired, smaller };
  return { desired: Math.max(...smaller), smaller: [] };
}
