import { createRng, exponential, logNormal, type Rng, uniformInt } from '@fairgate/runtime';
import {
  type ArrivalSpec,
  type LengthSpec,
  resolveInstant,
  type Scenario,
  ScenarioError,
} from './scenario.js';

/**
 * Arrival schedules: every tenant's arrival process as a rate function of time, sampled as
 * a non-homogeneous Poisson process by thinning (candidates at the peak rate, each kept
 * with probability rate(t) / peak). Exact for every kind, and seeded: the same scenario and
 * seed give the same arrival times and lengths, independently per tenant (one PRNG stream
 * per tenant name).
 */
export interface Arrival {
  /** Seconds from the start of the run. */
  t: number;
  /** Index into scenario.tenants. */
  tenant: number;
  /** Per-tenant sequence number (0, 1, ...). */
  seq: number;
  promptTokens: number;
  outputTokens: number;
  /** A shared_prefix tenant's request: whose conversation, and which turn of it. */
  conversation?: ConversationTurn;
}

export interface ConversationTurn {
  user: number;
  /** How many conversations this user finished before (a new one after max_turns). */
  round: number;
  /** Earlier turns in this conversation (0 = its first request). */
  turn: number;
}

export interface RateFunction {
  rate(t: number): number;
  peak: number;
}

/** The rate (requests per second) of an arrival process at time t of a run of `duration` s. */
export function rateFunction(spec: ArrivalSpec, duration: number): RateFunction {
  const start = spec.start_s === undefined ? 0 : resolveInstant(spec.start_s, duration);
  const end = spec.end_s === undefined ? duration : resolveInstant(spec.end_s, duration);
  const inWindow = (t: number) => t >= start && t < end;
  switch (spec.kind) {
    case 'poisson':
      return { rate: (t) => (inWindow(t) ? spec.rate : 0), peak: spec.rate };
    case 'onoff': {
      const cycle = spec.on_s + spec.off_s;
      return {
        rate: (t) => {
          if (!inWindow(t)) return 0;
          const phase = (t - start) % cycle;
          const on = spec.start_off ? phase >= spec.off_s : phase < spec.on_s;
          return on ? spec.rate : 0;
        },
        peak: spec.rate,
      };
    }
    case 'ramp': {
      const span = Math.max(1e-9, end - start);
      return {
        rate: (t) => (inWindow(t) ? spec.from + ((spec.to - spec.from) * (t - start)) / span : 0),
        peak: Math.max(spec.from, spec.to),
      };
    }
    case 'burst': {
      const at = resolveInstant(spec.at_s, duration);
      const until = at + resolveInstant(spec.duration_s, duration);
      return {
        rate: (t) => {
          if (!inWindow(t)) return 0;
          return t >= at && t < until ? spec.rate : spec.base_rate;
        },
        peak: Math.max(spec.rate, spec.base_rate),
      };
    }
    case 'diurnal': {
      const period = resolveInstant(spec.period_s, duration);
      const swing = spec.peak_rate - spec.base_rate;
      return {
        rate: (t) => {
          if (!inWindow(t)) return 0;
          return (
            spec.base_rate + (swing * (1 - Math.cos((2 * Math.PI * (t - start)) / period))) / 2
          );
        },
        peak: Math.max(spec.peak_rate, spec.base_rate),
      };
    }
  }
}

/** Expected number of arrivals over [0, duration) (numeric integral, 1 ms steps). */
export function expectedArrivals(spec: ArrivalSpec, duration: number): number {
  const { rate } = rateFunction(spec, duration);
  const step = 0.001;
  let sum = 0;
  for (let t = step / 2; t < duration; t += step) sum += rate(t) * step;
  return sum;
}

/** Arrival times of one process over [0, duration), sorted; at most `limit` candidates. */
export function arrivalTimes(
  spec: ArrivalSpec,
  duration: number,
  rng: Rng,
  limit = Number.POSITIVE_INFINITY,
): number[] {
  const { rate, peak } = rateFunction(spec, duration);
  const times: number[] = [];
  if (peak <= 0) return times;
  let t = 0;
  let candidates = 0;
  for (;;) {
    t += exponential(rng, peak);
    if (t >= duration) break;
    if (++candidates > limit) {
      throw new RangeError(`more than ${limit} arrival candidates`);
    }
    if (rng.next() * peak < rate(t)) times.push(t);
  }
  return times;
}

/** A log-normal length, rounded and clamped to [min, max]. */
export function drawLength(spec: LengthSpec, rng: Rng): number {
  const value = Math.round(logNormal(rng, spec.median, spec.sigma));
  return Math.min(spec.max, Math.max(spec.min, value));
}

/** The whole run's arrivals (all tenants), sorted by time. Bounded by limits.max_requests. */
export function buildSchedule(scenario: Scenario, duration = scenario.duration_s): Arrival[] {
  const all: Arrival[] = [];
  const limit = scenario.limits.max_requests;
  scenario.tenants.forEach((tenant, index) => {
    const timing = createRng(scenario.seed, `arrivals:${tenant.name}`);
    const lengths = createRng(scenario.seed, `lengths:${tenant.name}`);
    const users = createRng(scenario.seed, `users:${tenant.name}`);
    const turnsSoFar = new Map<number, number>();
    const shared = tenant.shared_prefix;
    // A tenant without an arrival process only submits the scenario's batch.
    if (!tenant.arrival) return;
    let times: number[];
    try {
      times = arrivalTimes(tenant.arrival, duration, timing, limit * 20);
    } catch {
      throw new ScenarioError(scenario.name, [
        `tenants[${index}].arrival: the peak rate over ${duration} s asks for too many arrivals (limits.max_requests ${limit})`,
      ]);
    }
    times.forEach((t, seq) => {
      const arrival: Arrival = {
        t,
        tenant: index,
        seq,
        promptTokens: drawLength(tenant.prompt_tokens, lengths),
        outputTokens: drawLength(tenant.output_tokens, lengths),
      };
      if (shared) {
        const user = uniformInt(users, 0, shared.users - 1);
        const done = turnsSoFar.get(user) ?? 0;
        turnsSoFar.set(user, done + 1);
        arrival.conversation = {
          user,
          round: Math.floor(done / shared.max_turns),
          turn: done % shared.max_turns,
        };
      }
      all.push(arrival);
    });
  });
  if (all.length > limit) {
    throw new ScenarioError(scenario.name, [
      `the schedule has ${all.length} arrivals over ${duration} s, above limits.max_requests (${limit})`,
    ]);
  }
  return all.sort((a, b) => a.t - b.t || a.tenant - b.tenant);
}
