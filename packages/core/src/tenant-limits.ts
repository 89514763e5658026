/**
 * A tenant's budgets and rates over calendar windows, as pure arithmetic: tokens per UTC day
 * and per UTC month, requests per UTC minute. The scheduler applies the same rules inside its
 * enqueue, release and janitor scripts on the Redis server clock (lua/includes/limits.lua),
 * so they hold exactly across replicas; this module is the reference the Lua mirrors and
 * the LocalScheduler uses.
 *
 * - Each window is fixed and aligned to UTC: a minute, a day, a month. A counter belongs to
 *   the window it was counted in; the first request of a new window finds it at zero.
 * - A request is admitted while every token window it counts in has something left (used <
 *   limit) and its minute has a request left; a refusal changes nothing.
 * - Admitted, it counts one request in its minute and reserves its token estimate (input +
 *   max_tokens) in its day and month. At release the reservation is trued up to what the pod
 *   reported (input + output), in the windows it was made in when they are still current; a
 *   request that never got a slot gives its reservation back, and a release without usage
 *   keeps the estimate. Requests are never given back: a request admitted is a request made.
 * - Since a reservation is taken atomically with the check, the tokens used in a window
 *   exceed its limit by less than one request's estimate, across every replica.
 */

export interface TenantLimits {
  tokensPerDay: number | null;
  tokensPerMonth: number | null;
  requestsPerMinute: number | null;
}

export const NO_LIMITS: TenantLimits = {
  tokensPerDay: null,
  tokensPerMonth: null,
  requestsPerMinute: null,
};

/** Counters of the windows the tenant last counted in (ids as limitWindows gives them). */
export interface LimitCounters {
  minuteId: number;
  minuteRequests: number;
  dayId: number;
  dayTokens: number;
  monthId: number;
  monthTokens: number;
}

export const EMPTY_COUNTERS: LimitCounters = {
  minuteId: -1,
  minuteRequests: 0,
  dayId: -1,
  dayTokens: 0,
  monthId: -1,
  monthTokens: 0,
};

/** What an admitted request reserved, to be trued up or given back when it ends. */
export interface LimitCharge {
  tokens: number;
  /** The day (and month) it reserved in; null when that window has no limit. */
  dayId: number | null;
  monthId: number | null;
}

/** One window: its id and its end (ms since epoch). */
export interface LimitWindow {
  readonly id: number;
  readonly endMs: number;
}

export interface LimitWindows {
  readonly minute: LimitWindow;
  readonly day: LimitWindow;
  readonly month: LimitWindow;
}

const MINUTE_MS = 60_000;
const DAY_MS = 86_400_000;

/** The civil (proleptic Gregorian, UTC) date of a day number (days since 1970-01-01). */
export function civilFromDays(days: number): { year: number; month: number; day: number } {
  const z = days + 719_468;
  const era = Math.floor(z / 146_097);
  const doe = z - era * 146_097;
  const yoe = Math.floor(
    (doe - Math.floor(doe / 1_460) + Math.floor(doe / 36_524) - Math.floor(doe / 146_096)) / 365,
  );
  const doy = doe - (365 * yoe + Math.floor(yoe / 4) - Math.floor(yoe / 100));
  const mp = Math.floor((5 * doy + 2) / 153);
  const day = doy - Math.floor((153 * mp + 2) / 5) + 1;
  const month = mp < 10 ? mp + 3 : mp - 9;
  return { year: yoe + era * 400 + (month <= 2 ? 1 : 0), month, day };
}

/** The day number of a civil date (month 1-12): the inverse of civilFromDays. */
export function daysFromCivil(year: number, month: number, day: number): number {
  const y = month <= 2 ? year - 1 : year;
  const era = Math.floor(y / 400);
  const yoe = y - era * 400;
  const doy = Math.floor((153 * (month > 2 ? month - 3 : month + 9) + 2) / 5) + day - 1;
  const doe = yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy;
  return era * 146_097 + doe - 719_468;
}

/** The windows of the minute asked for last (every instant of a minute has the same). */
let windowsOfMinute: LimitWindows | undefined;

/**
 * The minute, day and month (UTC) that `nowMs` falls in. Month ids are year * 12 + month - 1.
 * A day and a month start on a minute, so the windows are worked out once a minute.
 */
export function limitWindows(nowMs: number): LimitWindows {
  const minuteId = Math.floor(nowMs / MINUTE_MS);
  if (windowsOfMinute?.minute.id === minuteId) return windowsOfMinute;
  const dayId = Math.floor(nowMs / DAY_MS);
  const { year, month } = civilFromDays(dayId);
  const nextMonthStart =
    month === 12 ? daysFromCivil(year + 1, 1, 1) : daysFromCivil(year, month + 1, 1);
  windowsOfMinute = {
    minute: { id: minuteId, endMs: (minuteId + 1) * MINUTE_MS },
    day: { id: dayId, endMs: (dayId + 1) * DAY_MS },
    month: { id: year * 12 + month - 1, endMs: nextMonthStart * DAY_MS },
  };
  return windowsOfMinute;
}

/** The counters as the windows of `windows` see them: a past window's count is zero. */
export function currentCounters(counters: LimitCounters, windows: LimitWindows): LimitCounters {
  return {
    minuteId: windows.minute.id,
    minuteRequests: counters.minuteId === windows.minute.id ? counters.minuteRequests : 0,
    dayId: windows.day.id,
    dayTokens: counters.dayId === windows.day.id ? counters.dayTokens : 0,
    monthId: windows.month.id,
    monthTokens: counters.monthId === windows.month.id ? counters.monthTokens : 0,
  };
}

/** One limit's standing, as OpenAI's x-ratelimit-* headers show it. */
export interface LimitStanding {
  limit: number;
  remaining: number;
  /** ms until the window ends (and the count starts again). */
  resetMs: number;
}

/** The tenant's standing: requests (the minute) and tokens (the tighter of day and month). */
export interface LimitsStanding {
  requests: LimitStanding | null;
  tokens: LimitStanding | null;
}

/** The standing of current counters (currentCounters) at nowMs. */
export function limitsStanding(
  limits: TenantLimits,
  counters: LimitCounters,
  windows: LimitWindows,
  nowMs: number,
): LimitsStanding {
  const standing = (limit: number, used: number, window: LimitWindow): LimitStanding => ({
    limit,
    remaining: Math.max(0, limit - used),
    resetMs: window.endMs - nowMs,
  });
  const requests =
    limits.requestsPerMinute === null
      ? null
      : standing(limits.requestsPerMinute, counters.minuteRequests, windows.minute);
  const day =
    limits.tokensPerDay === null
      ? null
      : standing(limits.tokensPerDay, counters.dayTokens, windows.day);
  const month =
    limits.tokensPerMonth === null
      ? null
      : standing(limits.tokensPerMonth, counters.monthTokens, windows.month);
  // The tighter window binds: the one with less left (on a tie the month, which ends last).
  const tokens = month && (!day || month.remaining <= day.remaining) ? month : day;
  return { requests, tokens };
}

export type LimitsDecision =
  | { ok: true; counters: LimitCounters; charge: LimitCharge; standing: LimitsStanding }
  | {
      ok: false;
      reason: 'budget_exhausted' | 'rate_limited';
      /** ms until the refusing window ends. */
      retryAfterMs: number;
      standing: LimitsStanding;
    };

export function hasLimits(limits: TenantLimits): boolean {
  return (
    limits.tokensPerDay !== null ||
    limits.tokensPerMonth !== null ||
    limits.requestsPerMinute !== null
  );
}

/**
 * Admission of a request estimated at `estimate` tokens, from the stored counters. A spent
 * token window refuses with budget_exhausted until the latest spent window ends; else a full
 * minute refuses with rate_limited until the minute ends. Admitted: the counters to store
 * after the request counts, what it reserved, and the standing after it.
 */
export function admitUnderLimits(
  limits: TenantLimits,
  stored: LimitCounters,
  estimate: number,
  nowMs: number,
): LimitsDecision {
  const windows = limitWindows(nowMs);
  const counters = currentCounters(stored, windows);
  let budgetEnd = 0;
  if (limits.tokensPerDay !== null && counters.dayTokens >= limits.tokensPerDay) {
    budgetEnd = windows.day.endMs;
  }
  if (limits.tokensPerMonth !== null && counters.monthTokens >= limits.tokensPerMonth) {
    budgetEnd = Math.max(budgetEnd, windows.month.endMs);
  }
  if (budgetEnd > 0) {
    return {
      ok: false,
      reason: 'budget_exhausted',
      retryAfterMs: budgetEnd - nowMs,
      standing: limitsStanding(limits, counters, windows, nowMs),
    };
  }
  if (limits.requestsPerMinute !== null && counters.minuteRequests >= limits.requestsPerMinute) {
    return {
      ok: false,
      reason: 'rate_limited',
      retryAfterMs: windows.minute.endMs - nowMs,
      standing: limitsStanding(limits, counters, windows, nowMs),
    };
  }
  const counted = countUnderLimits(limits, stored, estimate, nowMs);
  return {
    ok: true,
    counters: counted.counters,
    charge: counted.charge,
    standing: counted.standing,
  };
}

/**
 * Counts a request without a check (a handover: the request already runs): one request in
 * its minute, `estimate` tokens in its day and month, where limited. The counters to store,
 * what it reserved, and the standing after it.
 */
export function countUnderLimits(
  limits: TenantLimits,
  stored: LimitCounters,
  estimate: number,
  nowMs: number,
): { counters: LimitCounters; charge: LimitCharge; standing: LimitsStanding } {
  const windows = limitWindows(nowMs);
  const counters = currentCounters(stored, windows);
  // Only the limited windows are counted (and move to the current window); the others keep
  // what they hold, as the script leaves their fields alone.
  const after = copyCounters(stored);
  if (limits.requestsPerMinute !== null) {
    after.minuteId = windows.minute.id;
    after.minuteRequests = counters.minuteRequests + 1;
  }
  if (limits.tokensPerDay !== null) {
    after.dayId = windows.day.id;
    after.dayTokens = counters.dayTokens + estimate;
  }
  if (limits.tokensPerMonth !== null) {
    after.monthId = windows.month.id;
    after.monthTokens = counters.monthTokens + estimate;
  }
  return {
    counters: after,
    charge: {
      tokens: estimate,
      dayId: limits.tokensPerDay !== null ? windows.day.id : null,
      monthId: limits.tokensPerMonth !== null ? windows.month.id : null,
    },
    standing: limitsStanding(limits, currentCounters(after, windows), windows, nowMs),
  };
}

/**
 * A reservation trued up to `actual` tokens (0 gives it back): the difference goes to each
 * window it was made in that is still the counters' own (a window that has ended keeps what
 * it had).
 */
export function settleCharge(
  counters: LimitCounters,
  charge: LimitCharge,
  actual: number,
): LimitCounters {
  const delta = actual - charge.tokens;
  const settled = copyCounters(counters);
  if (charge.dayId === counters.dayId) settled.dayTokens += delta;
  if (charge.monthId === counters.monthId) settled.monthTokens += delta;
  return settled;
}

/** A copy of `counters` (a literal of its six fields: counters are copied on every request). */
function copyCounters(counters: LimitCounters): LimitCounters {
  return {
    minuteId: counters.minuteId,
    minuteRequests: counters.minuteRequests,
    dayId: counters.dayId,
    dayTokens: counters.dayTokens,
    monthId: counters.monthId,
    monthTokens: counters.monthTokens,
  };
}

/** An admission refused after it counted (a full queue, in the same call): all of it back. */
export function undoAdmission(
  counters: LimitCounters,
  charge: LimitCharge,
  limits: TenantLimits,
): LimitCounters {
  const settled = settleCharge(counters, charge, 0);
  return {
    ...settled,
    minuteRequests: settled.minuteRequests - (limits.requestsPerMinute !== null ? 1 : 0),
  };
}
