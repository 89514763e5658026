import {
  ACTION_HISTORY,
  type ActionCode,
  type ActionKind,
  type ControllerAction,
  type ControllerConfig,
  type ControllerState,
  clampCap,
  initialState,
} from './aimd.js';

/**
 * The controller state as stored in the shared `ctl` hash (fenced write), so a new leader
 * continues where the old one stopped. JSON with a version and the writer (replica and
 * epoch: which leadership wrote it, for audits and /admin/state).
 */
export const STATE_VERSION = 1;

export interface StateWriter {
  replica: string;
  epoch: number;
}

export interface DecodedState {
  state: ControllerState;
  writer: StateWriter | null;
  /** Why a stored state was not used (the initial state is returned instead). */
  problem?: string;
}

export function encodeState(state: ControllerState, writer: StateWriter): string {
  return JSON.stringify({ version: STATE_VERSION, writer, state });
}

const KINDS: readonly ActionKind[] = ['increase', 'decrease', 'hold'];
const CODES: readonly ActionCode[] = [
  'below_band',
  'queue_bound',
  'pods_in_band',
  'above_band',
  'upstream_errors',
  'in_band',
  'cooldown',
  'few_samples',
  'no_demand',
  'app_limited',
  'at_max',
  'at_min',
  'no_healthy_pods',
];

const isCount = (value: unknown): value is number =>
  typeof value === 'number' && Number.isInteger(value) && value >= 0;

function readAction(raw: unknown): ControllerAction | null {
  if (!raw || typeof raw !== 'object') return null;
  const a = raw as Record<string, unknown>;
  const p99 = a.p99S;
  const p99Ok = p99 === null || p99 === 'errors' || (typeof p99 === 'number' && p99 >= 0);
  if (
    !isCount(a.tick) ||
    !KINDS.includes(a.kind as ActionKind) ||
    !CODES.includes(a.code as ActionCode) ||
    typeof a.reason !== 'string' ||
    !isCount(a.capBefore) ||
    !isCount(a.capAfter) ||
    !isCount(a.budget) ||
    !p99Ok ||
    !isCount(a.samples) ||
    !isCount(a.errors) ||
    !isCount(a.windowPeak)
  ) {
    return null;
  }
  return a as unknown as ControllerAction;
}

/**
 * Reads a stored state. Absent, unreadable or of another version: the initial state (with
 * `problem` saying why, except for absent). The cap is clamped into the current config's
 * [min, max], so a config change applies on the next tick.
 */
export function decodeState(text: string | null, config: ControllerConfig): DecodedState {
  if (text === null) return { state: initialState(config), writer: null };
  const fallback = (problem: string): DecodedState => ({
    state: initialState(config),
    writer: null,
    problem,
  });
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return fallback('stored controller state is not JSON');
  }
  const root = parsed as { version?: unknown; writer?: unknown; state?: unknown } | null;
  if (!root || typeof root !== 'object')
    return fallback('stored controller state is not an object');
  if (root.version !== STATE_VERSION) {
    return fallback(`stored controller state has version ${String(root.version)}`);
  }
  const s = root.state as Record<string, unknown> | undefined;
  if (
    !s ||
    !isCount(s.tick) ||
    !isCount(s.capPerWorker) ||
    !isCount(s.cooldownLeft) ||
    !(s.ticksSinceDecrease === null || isCount(s.ticksSinceDecrease)) ||
    !Array.isArray(s.peaks) ||
    !s.peaks.every(isCount) ||
    !Array.isArray(s.actions)
  ) {
    return fallback('stored controller state has missing or bad fields');
  }
  const actions = s.actions.map(readAction);
  if (actions.some((a) => a === null)) return fallback('stored controller action is malformed');
  const w = root.writer as Record<string, unknown> | undefined;
  const writer =
    w && typeof w.replica === 'string' && isCount(w.epoch)
      ? { replica: w.replica, epoch: w.epoch }
      : null;
  return {
    writer,
    state: {
      tick: s.tick,
      capPerWorker: clampCap(s.capPerWorker, config),
      cooldownLeft: Math.min(s.cooldownLeft, config.cooldownTicks),
      ticksSinceDecrease: s.ticksSinceDecrease as number | null,
      peaks: s.peaks as number[],
      actions: (actions as ControllerAction[]).slice(-ACTION_HISTORY),
    },
  };
}
