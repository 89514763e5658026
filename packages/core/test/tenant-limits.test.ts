import { describe, expect, it } from 'vitest';
import {
  admitUnderLimits,
  civilFromDays,
  currentCounters,
  daysFromCivil,
  EMPTY_COUNTERS,
  hasLimits,
  type LimitCharge,
  type LimitCounters,
  type LimitsDecision,
  type LimitsStanding,
  limitsStanding,
  limitWindows,
  NO_LIMITS,
  settleCharge,
  type TenantLimits,
  undoAdmission,
} from '../src/index.js';

const MINUTE_MS = 60_000;
const DAY_MS = 86_400_000;

/** The UTC civil date of a day number, as Date sees it. */
function dateCivil(days: number): { year: number; month: number; day: number } {
  const d = new Date(days * DAY_MS);
  return { year: d.getUTCFullYear(), month: d.getUTCMonth() + 1, day: d.getUTCDate() };
}

/** Checks every day in [from, to] by `step`; returns the first mismatch (or null). */
function firstCivilMismatch(from: number, to: number, step: number): string | null {
  for (let days = from; days <= to; days += step) {
    const civil = civilFromDays(days);
    const expected = dateCivil(days);
    if (
      civil.year !== expected.year ||
      civil.month !== expected.month ||
      civil.day !== expected.day
    ) {
      return `civilFromDays(${days}) = ${JSON.stringify(civil)}, Date says ${JSON.stringify(expected)}`;
    }
    const back = daysFromCivil(civil.year, civil.month, civil.day);
    if (back !== days) {
      return `daysFromCivil(${civil.year}, ${civil.month}, ${civil.day}) = ${back}, expected ${days}`;
    }
  }
  return null;
}

function daysOf(year: number, month: number, day: number): number {
  return Date.UTC(year, month - 1, day) / DAY_MS;
}

describe('civilFromDays / daysFromCivil', () => {
  it('round-trip and agree with Date for every day of 1900..2200', () => {
    const from = daysOf(1900, 1, 1);
    const to = daysOf(2200, 12, 31);
    expect(to - from).toBeGreaterThan(100_000);
    expect(firstCivilMismatch(from, to, 1)).toBeNull();
  });

  it('round-trip and agree with Date for every day from -800000 to +800000', () => {
    expect(firstCivilMismatch(-800_000, 800_000, 1)).toBeNull();
  });

  it('round-trip and agree with Date on a sparse sweep far out (within Date range)', () => {
    // Date covers +-100,000,000 days from the epoch.
    expect(firstCivilMismatch(-100_000_000, 100_000_000, 9_973)).toBeNull();
    expect(firstCivilMismatch(-100_000_000, -99_990_000, 1)).toBeNull();
    expect(firstCivilMismatch(99_990_000, 100_000_000, 1)).toBeNull();
  });

  it('round-trips every civil date of 1600..2400 written as a date', () => {
    const monthLength = (y: number, m: number) => new Date(Date.UTC(y, m, 0)).getUTCDate();
    let previous = daysFromCivil(1599, 12, 31);
    let problem: string | null = null;
    for (let y = 1600; y <= 2400 && !problem; y++) {
      for (let m = 1; m <= 12 && !problem; m++) {
        for (let d = 1; d <= monthLength(y, m); d++) {
          const days = daysFromCivil(y, m, d);
          if (days !== previous + 1) {
            problem = `daysFromCivil(${y}, ${m}, ${d}) = ${days}, expected ${previous + 1}`;
            break;
          }
          const c = civilFromDays(days);
          if (c.year !== y || c.month !== m || c.day !== d) {
            problem = `civilFromDays(${days}) = ${JSON.stringify(c)}, expected ${y}-${m}-${d}`;
            break;
          }
          previous = days;
        }
      }
    }
    expect(problem).toBeNull();
  });

  it.each([
    // year, month, day, days since epoch
    [1970, 1, 1, 0],
    [1969, 12, 31, -1],
    [1970, 1, 2, 1],
    [2000, 1, 1, 10_957],
    [2000, 3, 1, 11_017],
    [0, 3, 1, -719_468],
    [1, 1, 1, -719_162],
    [-1, 12, 31, -719_529],
  ])('%i-%i-%i is day %i', (year, month, day, days) => {
    expect(daysFromCivil(year, month, day)).toBe(days);
    expect(civilFromDays(days)).toEqual({ year, month, day });
  });

  it.each([
    // a leap year's Feb 29 exists; the day after Feb 28 is Feb 29 or Mar 1
    [2000, true],
    [2024, true],
    [1600, true],
    [2400, true],
    [1996, true],
    [1900, false],
    [2100, false],
    [2200, false],
    [2300, false],
    [2023, false],
    [2025, false],
  ])('%i leap: %s', (year, leap) => {
    const feb28 = daysFromCivil(year, 2, 28);
    const next = civilFromDays(feb28 + 1);
    expect(next).toEqual(leap ? { year, month: 2, day: 29 } : { year, month: 3, day: 1 });
    expect(daysFromCivil(year, 3, 1) - daysFromCivil(year, 2, 1)).toBe(leap ? 29 : 28);
    expect(daysFromCivil(year + 1, 1, 1) - daysFromCivil(year, 1, 1)).toBe(leap ? 366 : 365);
    if (leap) {
      expect(daysFromCivil(year, 2, 29)).toBe(feb28 + 1);
      expect(dateCivil(feb28 + 1)).toEqual({ year, month: 2, day: 29 });
    }
  });

  it('places the named leap days where Date does', () => {
    expect(civilFromDays(Date.UTC(2000, 1, 29) / DAY_MS)).toEqual({
      year: 2000,
      month: 2,
      day: 29,
    });
    expect(civilFromDays(Date.UTC(2024, 1, 29) / DAY_MS)).toEqual({
      year: 2024,
      month: 2,
      day: 29,
    });
    expect(civilFromDays(Date.UTC(1900, 1, 28) / DAY_MS + 1)).toEqual({
      year: 1900,
      month: 3,
      day: 1,
    });
    expect(civilFromDays(Date.UTC(2100, 1, 28) / DAY_MS + 1)).toEqual({
      year: 2100,
      month: 3,
      day: 1,
    });
  });
});

interface WindowsRow {
  name: string;
  now: number;
  minute: [id: number, endMs: number];
  day: [id: number, endMs: number];
  month: [id: number, endMs: number];
}

const windowRows: WindowsRow[] = [
  {
    name: 'start of epoch',
    now: 0,
    minute: [0, 60_000],
    day: [0, DAY_MS],
    month: [1970 * 12, Date.UTC(1970, 1, 1)],
  },
  {
    name: 'last ms before the epoch',
    now: -1,
    minute: [-1, 0],
    day: [-1, 0],
    month: [1969 * 12 + 11, 0],
  },
  {
    name: 'last ms of a minute',
    now: Date.UTC(2024, 4, 15, 10, 30, 59, 999),
    minute: [Date.UTC(2024, 4, 15, 10, 30) / MINUTE_MS, Date.UTC(2024, 4, 15, 10, 31)],
    day: [Date.UTC(2024, 4, 15) / DAY_MS, Date.UTC(2024, 4, 16)],
    month: [2024 * 12 + 4, Date.UTC(2024, 5, 1)],
  },
  {
    name: 'first ms of a minute',
    now: Date.UTC(2024, 4, 15, 10, 31, 0, 0),
    minute: [Date.UTC(2024, 4, 15, 10, 31) / MINUTE_MS, Date.UTC(2024, 4, 15, 10, 32)],
    day: [Date.UTC(2024, 4, 15) / DAY_MS, Date.UTC(2024, 4, 16)],
    month: [2024 * 12 + 4, Date.UTC(2024, 5, 1)],
  },
  {
    name: '2024-02-28 23:59:59.999 (leap year)',
    now: Date.UTC(2024, 1, 28, 23, 59, 59, 999),
    minute: [Date.UTC(2024, 1, 28, 23, 59) / MINUTE_MS, Date.UTC(2024, 1, 29)],
    day: [Date.UTC(2024, 1, 28) / DAY_MS, Date.UTC(2024, 1, 29)],
    month: [2024 * 12 + 1, Date.UTC(2024, 2, 1)],
  },
  {
    name: '2024-02-29 23:59:59.999 (leap day)',
    now: Date.UTC(2024, 1, 29, 23, 59, 59, 999),
    minute: [Date.UTC(2024, 1, 29, 23, 59) / MINUTE_MS, Date.UTC(2024, 2, 1)],
    day: [Date.UTC(2024, 1, 29) / DAY_MS, Date.UTC(2024, 2, 1)],
    month: [2024 * 12 + 1, Date.UTC(2024, 2, 1)],
  },
  {
    name: '2024-03-01 00:00:00.000 (after the leap day)',
    now: Date.UTC(2024, 2, 1),
    minute: [Date.UTC(2024, 2, 1) / MINUTE_MS, Date.UTC(2024, 2, 1, 0, 1)],
    day: [Date.UTC(2024, 2, 1) / DAY_MS, Date.UTC(2024, 2, 2)],
    month: [2024 * 12 + 2, Date.UTC(2024, 3, 1)],
  },
  {
    name: '2023-02-28 23:59:59.999 (common year)',
    now: Date.UTC(2023, 1, 28, 23, 59, 59, 999),
    minute: [Date.UTC(2023, 1, 28, 23, 59) / MINUTE_MS, Date.UTC(2023, 2, 1)],
    day: [Date.UTC(2023, 1, 28) / DAY_MS, Date.UTC(2023, 2, 1)],
    month: [2023 * 12 + 1, Date.UTC(2023, 2, 1)],
  },
  {
    name: '1900-02-28 12:00 (century, not leap)',
    now: Date.UTC(1900, 1, 28, 12),
    minute: [Date.UTC(1900, 1, 28, 12) / MINUTE_MS, Date.UTC(1900, 1, 28, 12, 1)],
    day: [Date.UTC(1900, 1, 28) / DAY_MS, Date.UTC(1900, 2, 1)],
    month: [1900 * 12 + 1, Date.UTC(1900, 2, 1)],
  },
  {
    name: '2100-02-28 23:59:59.999 (century, not leap)',
    now: Date.UTC(2100, 1, 28, 23, 59, 59, 999),
    minute: [Date.UTC(2100, 1, 28, 23, 59) / MINUTE_MS, Date.UTC(2100, 2, 1)],
    day: [Date.UTC(2100, 1, 28) / DAY_MS, Date.UTC(2100, 2, 1)],
    month: [2100 * 12 + 1, Date.UTC(2100, 2, 1)],
  },
  {
    name: 'last ms of 2025-12-31',
    now: Date.UTC(2025, 11, 31, 23, 59, 59, 999),
    minute: [Date.UTC(2025, 11, 31, 23, 59) / MINUTE_MS, Date.UTC(2026, 0, 1)],
    day: [Date.UTC(2025, 11, 31) / DAY_MS, Date.UTC(2026, 0, 1)],
    month: [2025 * 12 + 11, Date.UTC(2026, 0, 1)],
  },
  {
    name: 'first ms of 2026-01-01',
    now: Date.UTC(2026, 0, 1),
    minute: [Date.UTC(2026, 0, 1) / MINUTE_MS, Date.UTC(2026, 0, 1, 0, 1)],
    day: [Date.UTC(2026, 0, 1) / DAY_MS, Date.UTC(2026, 0, 2)],
    month: [2026 * 12, Date.UTC(2026, 1, 1)],
  },
  {
    name: 'mid-month',
    now: Date.UTC(2025, 6, 16, 12, 7, 30, 500),
    minute: [Date.UTC(2025, 6, 16, 12, 7) / MINUTE_MS, Date.UTC(2025, 6, 16, 12, 8)],
    day: [Date.UTC(2025, 6, 16) / DAY_MS, Date.UTC(2025, 6, 17)],
    month: [2025 * 12 + 6, Date.UTC(2025, 7, 1)],
  },
  {
    name: 'last ms of a 30-day month',
    now: Date.UTC(2025, 3, 30, 23, 59, 59, 999),
    minute: [Date.UTC(2025, 3, 30, 23, 59) / MINUTE_MS, Date.UTC(2025, 4, 1)],
    day: [Date.UTC(2025, 3, 30) / DAY_MS, Date.UTC(2025, 4, 1)],
    month: [2025 * 12 + 3, Date.UTC(2025, 4, 1)],
  },
  {
    name: 'before the epoch, mid-month',
    now: Date.UTC(1969, 6, 20, 20, 17, 40),
    minute: [Date.UTC(1969, 6, 20, 20, 17) / MINUTE_MS, Date.UTC(1969, 6, 20, 20, 18)],
    day: [Date.UTC(1969, 6, 20) / DAY_MS, Date.UTC(1969, 6, 21)],
    month: [1969 * 12 + 6, Date.UTC(1969, 7, 1)],
  },
];

describe('limitWindows', () => {
  it.each(windowRows)('$name', ({ now, minute, day, month }) => {
    expect(limitWindows(now)).toEqual({
      minute: { id: minute[0], endMs: minute[1] },
      day: { id: day[0], endMs: day[1] },
      month: { id: month[0], endMs: month[1] },
    });
  });

  function checkInstant(t: number): string | null {
    const w = limitWindows(t);
    const d = new Date(t);
    const y = d.getUTCFullYear();
    const m = d.getUTCMonth();
    const dd = d.getUTCDate();
    const problems: string[] = [];
    if (w.month.id !== y * 12 + m) problems.push(`month.id ${w.month.id}`);
    if (w.month.endMs !== Date.UTC(y, m + 1, 1)) problems.push(`month.endMs ${w.month.endMs}`);
    if (!(Date.UTC(y, m, 1) <= t && t < w.month.endMs)) problems.push('month does not contain t');
    if (w.day.id !== Date.UTC(y, m, dd) / DAY_MS) problems.push(`day.id ${w.day.id}`);
    if (w.day.endMs !== Date.UTC(y, m, dd + 1)) problems.push(`day.endMs ${w.day.endMs}`);
    if (!(w.day.id * DAY_MS <= t && t < w.day.endMs)) problems.push('day does not contain t');
    if (w.day.endMs - w.day.id * DAY_MS !== DAY_MS) problems.push('day is not a day long');
    const minuteStart = Date.UTC(y, m, dd, d.getUTCHours(), d.getUTCMinutes());
    if (w.minute.id !== minuteStart / MINUTE_MS) problems.push(`minute.id ${w.minute.id}`);
    if (w.minute.endMs !== minuteStart + MINUTE_MS) problems.push(`minute.endMs ${w.minute.endMs}`);
    if (!(w.minute.id * MINUTE_MS <= t && t < w.minute.endMs)) {
      problems.push('minute does not contain t');
    }
    // Ends are nested: a minute ends no later than its day, a day no later than its month.
    if (!(w.minute.endMs <= w.day.endMs && w.day.endMs <= w.month.endMs)) {
      problems.push('windows are not nested');
    }
    return problems.length === 0 ? null : `${new Date(t).toISOString()}: ${problems.join(', ')}`;
  }

  it('agrees with Date every ~7 hours over 2023..2025', () => {
    const step = 7 * 3_600_000 + 12_345;
    const from = Date.UTC(2023, 0, 1);
    const to = Date.UTC(2026, 0, 1);
    let checked = 0;
    let problem: string | null = null;
    for (let t = from; t < to && !problem; t += step) {
      problem = checkInstant(t);
      checked++;
    }
    expect(problem).toBeNull();
    expect(checked).toBeGreaterThan(3_000);
  });

  it('agrees with Date on both sides of every month boundary of 1899..2101', () => {
    let problem: string | null = null;
    for (let y = 1899; y <= 2101 && !problem; y++) {
      for (let m = 0; m < 12 && !problem; m++) {
        const start = Date.UTC(y, m, 1);
        for (const t of [start - 1, start, start + 1, start + DAY_MS - 1, start + DAY_MS]) {
          problem = checkInstant(t);
          if (problem) break;
        }
        if (!problem) {
          const before = limitWindows(start - 1);
          const at = limitWindows(start);
          if (before.month.endMs !== start || at.month.id !== before.month.id + 1) {
            problem = `month boundary ${new Date(start).toISOString()}`;
          }
        }
      }
    }
    expect(problem).toBeNull();
  });

  it('agrees with Date on a sparse sweep of negative and far-future instants', () => {
    let problem: string | null = null;
    const step = 97 * DAY_MS + 4_321_987;
    for (let t = -8_000_000_000_000; t < 8_000_000_000_000 && !problem; t += step) {
      problem = checkInstant(t);
    }
    expect(problem).toBeNull();
  });
});

// A fixed instant: 2025-06-15 12:34:56.789 UTC.
const NOW = Date.UTC(2025, 5, 15, 12, 34, 56, 789);
const MINUTE_ID = Date.UTC(2025, 5, 15, 12, 34) / MINUTE_MS;
const MINUTE_END = Date.UTC(2025, 5, 15, 12, 35);
const DAY_ID = Date.UTC(2025, 5, 15) / DAY_MS;
const DAY_END = Date.UTC(2025, 5, 16);
const MONTH_ID = 2025 * 12 + 5;
const MONTH_END = Date.UTC(2025, 6, 1);

function limits(
  requestsPerMinute: number | null,
  tokensPerDay: number | null,
  tokensPerMonth: number | null,
): TenantLimits {
  return { requestsPerMinute, tokensPerDay, tokensPerMonth };
}

/** Counters stored in the current windows of NOW. */
function current(minuteRequests: number, dayTokens: number, monthTokens: number): LimitCounters {
  return {
    minuteId: MINUTE_ID,
    minuteRequests,
    dayId: DAY_ID,
    dayTokens,
    monthId: MONTH_ID,
    monthTokens,
  };
}

function with_(base: LimitCounters, patch: Partial<LimitCounters>): LimitCounters {
  return { ...base, ...patch };
}

interface AdmitRow {
  name: string;
  limits: TenantLimits;
  stored: LimitCounters;
  estimate: number;
  now?: number;
  expected: LimitsDecision;
}

const admitRows: AdmitRow[] = [
  {
    name: 'no limits: admitted, nothing counted, no standing',
    limits: NO_LIMITS,
    stored: EMPTY_COUNTERS,
    estimate: 1_000,
    expected: {
      ok: true,
      counters: EMPTY_COUNTERS,
      charge: { tokens: 1_000, dayId: null, monthId: null },
      standing: { requests: null, tokens: null },
    },
  },
  {
    name: 'no limits with huge stored counters: admitted, counters kept as they are',
    limits: NO_LIMITS,
    stored: current(1_000_000, 1e12, 1e13),
    estimate: 5,
    expected: {
      ok: true,
      counters: current(1_000_000, 1e12, 1e13),
      charge: { tokens: 5, dayId: null, monthId: null },
      standing: { requests: null, tokens: null },
    },
  },
  {
    name: 'rpm: first request from empty counters',
    limits: limits(10, null, null),
    stored: EMPTY_COUNTERS,
    estimate: 100,
    expected: {
      ok: true,
      counters: with_(EMPTY_COUNTERS, { minuteId: MINUTE_ID, minuteRequests: 1 }),
      charge: { tokens: 100, dayId: null, monthId: null },
      standing: {
        requests: { limit: 10, remaining: 9, resetMs: MINUTE_END - NOW },
        tokens: null,
      },
    },
  },
  {
    name: 'rpm: the last request of the minute is admitted',
    limits: limits(10, null, null),
    stored: current(9, 0, 0),
    estimate: 100,
    expected: {
      ok: true,
      counters: current(10, 0, 0),
      charge: { tokens: 100, dayId: null, monthId: null },
      standing: {
        requests: { limit: 10, remaining: 0, resetMs: MINUTE_END - NOW },
        tokens: null,
      },
    },
  },
  {
    name: 'rpm full: rate_limited until the minute ends',
    limits: limits(10, null, null),
    stored: current(10, 0, 0),
    estimate: 100,
    expected: {
      ok: false,
      reason: 'rate_limited',
      retryAfterMs: MINUTE_END - NOW,
      standing: {
        requests: { limit: 10, remaining: 0, resetMs: MINUTE_END - NOW },
        tokens: null,
      },
    },
  },
  {
    name: 'rpm over-full: rate_limited, remaining clamps at 0',
    limits: limits(10, null, null),
    stored: current(15, 0, 0),
    estimate: 100,
    expected: {
      ok: false,
      reason: 'rate_limited',
      retryAfterMs: 3_211,
      standing: {
        requests: { limit: 10, remaining: 0, resetMs: 3_211 },
        tokens: null,
      },
    },
  },
  {
    name: 'rpm 0: always rate_limited',
    limits: limits(0, null, null),
    stored: EMPTY_COUNTERS,
    estimate: 1,
    expected: {
      ok: false,
      reason: 'rate_limited',
      retryAfterMs: MINUTE_END - NOW,
      standing: {
        requests: { limit: 0, remaining: 0, resetMs: MINUTE_END - NOW },
        tokens: null,
      },
    },
  },
  {
    name: 'rpm full in the previous minute: a new minute admits again',
    limits: limits(10, null, null),
    stored: with_(current(10, 0, 0), { minuteId: MINUTE_ID - 1 }),
    estimate: 100,
    expected: {
      ok: true,
      counters: current(1, 0, 0),
      charge: { tokens: 100, dayId: null, monthId: null },
      standing: {
        requests: { limit: 10, remaining: 9, resetMs: MINUTE_END - NOW },
        tokens: null,
      },
    },
  },
  {
    name: 'rpm full at the last ms of the minute: retry after 1 ms',
    limits: limits(10, null, null),
    stored: current(10, 0, 0),
    estimate: 100,
    now: MINUTE_END - 1,
    expected: {
      ok: false,
      reason: 'rate_limited',
      retryAfterMs: 1,
      standing: {
        requests: { limit: 10, remaining: 0, resetMs: 1 },
        tokens: null,
      },
    },
  },
  {
    name: 'rpm full, first ms of the next minute: admitted',
    limits: limits(10, null, null),
    stored: current(10, 0, 0),
    estimate: 100,
    now: MINUTE_END,
    expected: {
      ok: true,
      counters: with_(current(10, 0, 0), { minuteId: MINUTE_ID + 1, minuteRequests: 1 }),
      charge: { tokens: 100, dayId: null, monthId: null },
      standing: {
        requests: { limit: 10, remaining: 9, resetMs: MINUTE_MS },
        tokens: null,
      },
    },
  },
  {
    name: 'day: reserves the estimate in the day',
    limits: limits(null, 1_000, null),
    stored: current(0, 200, 0),
    estimate: 300,
    expected: {
      ok: true,
      counters: current(0, 500, 0),
      charge: { tokens: 300, dayId: DAY_ID, monthId: null },
      standing: {
        requests: null,
        tokens: { limit: 1_000, remaining: 500, resetMs: DAY_END - NOW },
      },
    },
  },
  {
    name: 'day spent (used == limit): budget_exhausted until the day ends',
    limits: limits(null, 1_000, null),
    stored: current(0, 1_000, 0),
    estimate: 1,
    expected: {
      ok: false,
      reason: 'budget_exhausted',
      retryAfterMs: DAY_END - NOW,
      standing: {
        requests: null,
        tokens: { limit: 1_000, remaining: 0, resetMs: DAY_END - NOW },
      },
    },
  },
  {
    name: 'day spent (used > limit): budget_exhausted until the day ends',
    limits: limits(null, 1_000, null),
    stored: current(0, 1_500, 0),
    estimate: 1,
    expected: {
      ok: false,
      reason: 'budget_exhausted',
      retryAfterMs: DAY_END - NOW,
      standing: {
        requests: null,
        tokens: { limit: 1_000, remaining: 0, resetMs: DAY_END - NOW },
      },
    },
  },
  {
    name: 'day 0: always budget_exhausted',
    limits: limits(null, 0, null),
    stored: EMPTY_COUNTERS,
    estimate: 0,
    expected: {
      ok: false,
      reason: 'budget_exhausted',
      retryAfterMs: DAY_END - NOW,
      standing: {
        requests: null,
        tokens: { limit: 0, remaining: 0, resetMs: DAY_END - NOW },
      },
    },
  },
  {
    name: 'day: admitted while used < limit though the estimate overshoots',
    limits: limits(null, 1_000, null),
    stored: current(0, 999, 0),
    estimate: 5_000,
    expected: {
      ok: true,
      counters: current(0, 5_999, 0),
      charge: { tokens: 5_000, dayId: DAY_ID, monthId: null },
      standing: {
        requests: null,
        tokens: { limit: 1_000, remaining: 0, resetMs: DAY_END - NOW },
      },
    },
  },
  {
    name: 'day spent yesterday: a new day admits again',
    limits: limits(null, 1_000, null),
    stored: with_(current(0, 5_000, 0), { dayId: DAY_ID - 1 }),
    estimate: 100,
    expected: {
      ok: true,
      counters: current(0, 100, 0),
      charge: { tokens: 100, dayId: DAY_ID, monthId: null },
      standing: {
        requests: null,
        tokens: { limit: 1_000, remaining: 900, resetMs: DAY_END - NOW },
      },
    },
  },
  {
    name: 'month: reserves the estimate in the month',
    limits: limits(null, null, 10_000),
    stored: current(0, 0, 2_000),
    estimate: 500,
    expected: {
      ok: true,
      counters: current(0, 0, 2_500),
      charge: { tokens: 500, dayId: null, monthId: MONTH_ID },
      standing: {
        requests: null,
        tokens: { limit: 10_000, remaining: 7_500, resetMs: MONTH_END - NOW },
      },
    },
  },
  {
    name: 'month spent: budget_exhausted until the month ends',
    limits: limits(null, null, 10_000),
    stored: current(0, 0, 10_000),
    estimate: 1,
    expected: {
      ok: false,
      reason: 'budget_exhausted',
      retryAfterMs: MONTH_END - NOW,
      standing: {
        requests: null,
        tokens: { limit: 10_000, remaining: 0, resetMs: MONTH_END - NOW },
      },
    },
  },
  {
    name: 'month spent last month: a new month admits again',
    limits: limits(null, null, 10_000),
    stored: with_(current(0, 0, 50_000), { monthId: MONTH_ID - 1 }),
    estimate: 100,
    expected: {
      ok: true,
      counters: current(0, 0, 100),
      charge: { tokens: 100, dayId: null, monthId: MONTH_ID },
      standing: {
        requests: null,
        tokens: { limit: 10_000, remaining: 9_900, resetMs: MONTH_END - NOW },
      },
    },
  },
  {
    name: 'month spent in the same month of last year: reads as 0',
    limits: limits(null, null, 10_000),
    stored: with_(current(0, 0, 50_000), { monthId: MONTH_ID - 12 }),
    estimate: 100,
    expected: {
      ok: true,
      counters: current(0, 0, 100),
      charge: { tokens: 100, dayId: null, monthId: MONTH_ID },
      standing: {
        requests: null,
        tokens: { limit: 10_000, remaining: 9_900, resetMs: MONTH_END - NOW },
      },
    },
  },
  {
    name: 'day and month spent: retry to the later end (the month)',
    limits: limits(null, 1_000, 10_000),
    stored: current(0, 1_000, 10_000),
    estimate: 1,
    expected: {
      ok: false,
      reason: 'budget_exhausted',
      retryAfterMs: MONTH_END - NOW,
      standing: {
        requests: null,
        tokens: { limit: 10_000, remaining: 0, resetMs: MONTH_END - NOW },
      },
    },
  },
  {
    name: 'month spent, day not: retry to the month end',
    limits: limits(null, 1_000, 10_000),
    stored: current(0, 100, 10_000),
    estimate: 1,
    expected: {
      ok: false,
      reason: 'budget_exhausted',
      retryAfterMs: MONTH_END - NOW,
      standing: {
        requests: null,
        tokens: { limit: 10_000, remaining: 0, resetMs: MONTH_END - NOW },
      },
    },
  },
  {
    name: 'day spent, month not: retry to the day end',
    limits: limits(null, 1_000, 10_000),
    stored: current(0, 1_000, 5_000),
    estimate: 1,
    expected: {
      ok: false,
      reason: 'budget_exhausted',
      retryAfterMs: DAY_END - NOW,
      standing: {
        requests: null,
        tokens: { limit: 1_000, remaining: 0, resetMs: DAY_END - NOW },
      },
    },
  },
  {
    name: 'day spent on the last day of the month: day and month end together',
    limits: limits(null, 1_000, 10_000),
    stored: with_(current(0, 1_000, 5_000), { dayId: Date.UTC(2025, 5, 30) / DAY_MS }),
    estimate: 1,
    now: Date.UTC(2025, 5, 30, 18),
    expected: {
      ok: false,
      reason: 'budget_exhausted',
      retryAfterMs: 6 * 3_600_000,
      standing: {
        requests: null,
        tokens: { limit: 1_000, remaining: 0, resetMs: 6 * 3_600_000 },
      },
    },
  },
  {
    name: 'budget exhausted (day) takes precedence over a full minute',
    limits: limits(10, 1_000, null),
    stored: current(10, 1_000, 0),
    estimate: 1,
    expected: {
      ok: false,
      reason: 'budget_exhausted',
      retryAfterMs: DAY_END - NOW,
      standing: {
        requests: { limit: 10, remaining: 0, resetMs: MINUTE_END - NOW },
        tokens: { limit: 1_000, remaining: 0, resetMs: DAY_END - NOW },
      },
    },
  },
  {
    name: 'budget exhausted (month) takes precedence over a full minute',
    limits: limits(10, null, 10_000),
    stored: current(12, 0, 10_001),
    estimate: 1,
    expected: {
      ok: false,
      reason: 'budget_exhausted',
      retryAfterMs: MONTH_END - NOW,
      standing: {
        requests: { limit: 10, remaining: 0, resetMs: MINUTE_END - NOW },
        tokens: { limit: 10_000, remaining: 0, resetMs: MONTH_END - NOW },
      },
    },
  },
  {
    name: 'full minute with budget left: rate_limited, standing shows the tokens',
    limits: limits(10, 1_000, 10_000),
    stored: current(10, 400, 9_000),
    estimate: 1,
    expected: {
      ok: false,
      reason: 'rate_limited',
      retryAfterMs: MINUTE_END - NOW,
      standing: {
        requests: { limit: 10, remaining: 0, resetMs: MINUTE_END - NOW },
        tokens: { limit: 1_000, remaining: 600, resetMs: DAY_END - NOW },
      },
    },
  },
  {
    name: 'refusal standing reads past counters as 0',
    limits: limits(10, 1_000, 10_000),
    stored: with_(current(10, 999_999, 9_500), { dayId: DAY_ID - 1 }),
    estimate: 1,
    expected: {
      ok: false,
      reason: 'rate_limited',
      retryAfterMs: MINUTE_END - NOW,
      standing: {
        requests: { limit: 10, remaining: 0, resetMs: MINUTE_END - NOW },
        tokens: { limit: 10_000, remaining: 500, resetMs: MONTH_END - NOW },
      },
    },
  },
  {
    name: 'only the day is limited: minute and month keep their stored ids and values',
    limits: limits(null, 1_000, null),
    stored: {
      minuteId: 7,
      minuteRequests: 42,
      dayId: DAY_ID - 3,
      dayTokens: 900,
      monthId: 11,
      monthTokens: 123_456,
    },
    estimate: 250,
    expected: {
      ok: true,
      counters: {
        minuteId: 7,
        minuteRequests: 42,
        dayId: DAY_ID,
        dayTokens: 250,
        monthId: 11,
        monthTokens: 123_456,
      },
      charge: { tokens: 250, dayId: DAY_ID, monthId: null },
      standing: {
        requests: null,
        tokens: { limit: 1_000, remaining: 750, resetMs: DAY_END - NOW },
      },
    },
  },
  {
    name: 'only the month is limited: minute and day keep their stored ids and values',
    limits: limits(null, null, 10_000),
    stored: {
      minuteId: 7,
      minuteRequests: 42,
      dayId: 3,
      dayTokens: 900,
      monthId: MONTH_ID,
      monthTokens: 1_000,
    },
    estimate: 250,
    expected: {
      ok: true,
      counters: {
        minuteId: 7,
        minuteRequests: 42,
        dayId: 3,
        dayTokens: 900,
        monthId: MONTH_ID,
        monthTokens: 1_250,
      },
      charge: { tokens: 250, dayId: null, monthId: MONTH_ID },
      standing: {
        requests: null,
        tokens: { limit: 10_000, remaining: 8_750, resetMs: MONTH_END - NOW },
      },
    },
  },
  {
    name: 'only rpm is limited: day and month keep their stored ids and values',
    limits: limits(5, null, null),
    stored: {
      minuteId: MINUTE_ID - 100,
      minuteRequests: 5,
      dayId: 3,
      dayTokens: 900,
      monthId: 11,
      monthTokens: 123_456,
    },
    estimate: 250,
    expected: {
      ok: true,
      counters: {
        minuteId: MINUTE_ID,
        minuteRequests: 1,
        dayId: 3,
        dayTokens: 900,
        monthId: 11,
        monthTokens: 123_456,
      },
      charge: { tokens: 250, dayId: null, monthId: null },
      standing: {
        requests: { limit: 5, remaining: 4, resetMs: MINUTE_END - NOW },
        tokens: null,
      },
    },
  },
  {
    name: 'all limits: every window counted',
    limits: limits(10, 1_000, 10_000),
    stored: current(3, 100, 2_000),
    estimate: 200,
    expected: {
      ok: true,
      counters: current(4, 300, 2_200),
      charge: { tokens: 200, dayId: DAY_ID, monthId: MONTH_ID },
      standing: {
        requests: { limit: 10, remaining: 6, resetMs: MINUTE_END - NOW },
        tokens: { limit: 1_000, remaining: 700, resetMs: DAY_END - NOW },
      },
    },
  },
  {
    name: 'all limits, all windows past: everything starts from 0',
    limits: limits(10, 1_000, 10_000),
    stored: {
      minuteId: MINUTE_ID - 1,
      minuteRequests: 10,
      dayId: DAY_ID - 1,
      dayTokens: 1_000,
      monthId: MONTH_ID - 1,
      monthTokens: 10_000,
    },
    estimate: 200,
    expected: {
      ok: true,
      counters: current(1, 200, 200),
      charge: { tokens: 200, dayId: DAY_ID, monthId: MONTH_ID },
      standing: {
        requests: { limit: 10, remaining: 9, resetMs: MINUTE_END - NOW },
        tokens: { limit: 1_000, remaining: 800, resetMs: DAY_END - NOW },
      },
    },
  },
  {
    name: 'tie between day and month remaining: the month binds the standing',
    limits: limits(null, 1_000, 10_000),
    stored: current(0, 400, 9_400),
    estimate: 100,
    expected: {
      ok: true,
      counters: current(0, 500, 9_500),
      charge: { tokens: 100, dayId: DAY_ID, monthId: MONTH_ID },
      standing: {
        requests: null,
        tokens: { limit: 10_000, remaining: 500, resetMs: MONTH_END - NOW },
      },
    },
  },
  {
    name: 'both overshot (both remaining 0): the month binds the standing',
    limits: limits(null, 1_000, 10_000),
    stored: current(0, 900, 9_900),
    estimate: 5_000,
    expected: {
      ok: true,
      counters: current(0, 5_900, 14_900),
      charge: { tokens: 5_000, dayId: DAY_ID, monthId: MONTH_ID },
      standing: {
        requests: null,
        tokens: { limit: 10_000, remaining: 0, resetMs: MONTH_END - NOW },
      },
    },
  },
  {
    name: 'month tighter than day: the month binds the standing',
    limits: limits(null, 1_000, 10_000),
    stored: current(0, 0, 9_800),
    estimate: 100,
    expected: {
      ok: true,
      counters: current(0, 100, 9_900),
      charge: { tokens: 100, dayId: DAY_ID, monthId: MONTH_ID },
      standing: {
        requests: null,
        tokens: { limit: 10_000, remaining: 100, resetMs: MONTH_END - NOW },
      },
    },
  },
  {
    name: 'day tighter than month by one token: the day binds the standing',
    limits: limits(null, 1_000, 10_000),
    stored: current(0, 401, 9_400),
    estimate: 100,
    expected: {
      ok: true,
      counters: current(0, 501, 9_500),
      charge: { tokens: 100, dayId: DAY_ID, monthId: MONTH_ID },
      standing: {
        requests: null,
        tokens: { limit: 1_000, remaining: 499, resetMs: DAY_END - NOW },
      },
    },
  },
  {
    name: 'an estimate of 0 is admitted and counts the request only',
    limits: limits(10, 1_000, 10_000),
    stored: current(0, 999, 9_999),
    estimate: 0,
    expected: {
      ok: true,
      counters: current(1, 999, 9_999),
      charge: { tokens: 0, dayId: DAY_ID, monthId: MONTH_ID },
      standing: {
        requests: { limit: 10, remaining: 9, resetMs: MINUTE_END - NOW },
        // day and month both have 1 left: the month binds
        tokens: { limit: 10_000, remaining: 1, resetMs: MONTH_END - NOW },
      },
    },
  },
  {
    name: 'last ms of the year: minute, day and month all reset in 1 ms',
    limits: limits(10, 1_000, 10_000),
    stored: EMPTY_COUNTERS,
    estimate: 100,
    now: Date.UTC(2025, 11, 31, 23, 59, 59, 999),
    expected: {
      ok: true,
      counters: {
        minuteId: Date.UTC(2025, 11, 31, 23, 59) / MINUTE_MS,
        minuteRequests: 1,
        dayId: Date.UTC(2025, 11, 31) / DAY_MS,
        dayTokens: 100,
        monthId: 2025 * 12 + 11,
        monthTokens: 100,
      },
      charge: { tokens: 100, dayId: Date.UTC(2025, 11, 31) / DAY_MS, monthId: 2025 * 12 + 11 },
      standing: {
        requests: { limit: 10, remaining: 9, resetMs: 1 },
        tokens: { limit: 1_000, remaining: 900, resetMs: 1 },
      },
    },
  },
  {
    name: 'month spent at the last ms of the year: retry after 1 ms',
    limits: limits(null, null, 10_000),
    stored: {
      ...EMPTY_COUNTERS,
      monthId: 2025 * 12 + 11,
      monthTokens: 10_000,
    },
    estimate: 1,
    now: Date.UTC(2025, 11, 31, 23, 59, 59, 999),
    expected: {
      ok: false,
      reason: 'budget_exhausted',
      retryAfterMs: 1,
      standing: {
        requests: null,
        tokens: { limit: 10_000, remaining: 0, resetMs: 1 },
      },
    },
  },
  {
    name: 'month spent in December: January admits again',
    limits: limits(null, null, 10_000),
    stored: {
      ...EMPTY_COUNTERS,
      monthId: 2025 * 12 + 11,
      monthTokens: 10_000,
    },
    estimate: 1,
    now: Date.UTC(2026, 0, 1),
    expected: {
      ok: true,
      counters: { ...EMPTY_COUNTERS, monthId: 2026 * 12, monthTokens: 1 },
      charge: { tokens: 1, dayId: null, monthId: 2026 * 12 },
      standing: {
        requests: null,
        tokens: {
          limit: 10_000,
          remaining: 9_999,
          resetMs: Date.UTC(2026, 1, 1) - Date.UTC(2026, 0, 1),
        },
      },
    },
  },
  {
    name: 'month spent on a leap day: retry until March 1',
    limits: limits(null, null, 10_000),
    stored: { ...EMPTY_COUNTERS, monthId: 2024 * 12 + 1, monthTokens: 10_000 },
    estimate: 1,
    now: Date.UTC(2024, 1, 29, 12),
    expected: {
      ok: false,
      reason: 'budget_exhausted',
      retryAfterMs: 12 * 3_600_000,
      standing: {
        requests: null,
        tokens: { limit: 10_000, remaining: 0, resetMs: 12 * 3_600_000 },
      },
    },
  },
];

describe('admitUnderLimits', () => {
  it.each(admitRows)('$name', ({ limits, stored, estimate, now, expected }) => {
    const storedCopy = structuredClone(stored);
    const limitsCopy = structuredClone(limits);
    expect(admitUnderLimits(limits, stored, estimate, now ?? NOW)).toEqual(expected);
    // Pure: the inputs are left as they were.
    expect(stored).toEqual(storedCopy);
    expect(limits).toEqual(limitsCopy);
  });

  it('does not alias the stored counters in its result', () => {
    const stored = current(0, 0, 0);
    const decision = admitUnderLimits(NO_LIMITS, stored, 1, NOW);
    expect(decision.ok).toBe(true);
    if (decision.ok) {
      expect(decision.counters).toEqual(stored);
      expect(decision.counters).not.toBe(stored);
    }
  });

  it('admits exactly `rpm` requests in a minute, then refuses until the next one', () => {
    const l = limits(3, null, null);
    let counters = EMPTY_COUNTERS;
    const outcomes: boolean[] = [];
    for (let i = 0; i < 5; i++) {
      const d = admitUnderLimits(l, counters, 10, NOW + i);
      outcomes.push(d.ok);
      if (d.ok) counters = d.counters;
    }
    expect(outcomes).toEqual([true, true, true, false, false]);
    const next = admitUnderLimits(l, counters, 10, MINUTE_END);
    expect(next.ok).toBe(true);
  });

  it('overshoots a day budget by less than one estimate', () => {
    const l = limits(null, 1_000, null);
    let counters = EMPTY_COUNTERS;
    let admitted = 0;
    for (let i = 0; i < 100; i++) {
      const d = admitUnderLimits(l, counters, 300, NOW + i);
      if (!d.ok) {
        expect(d.reason).toBe('budget_exhausted');
        expect(d.retryAfterMs).toBe(DAY_END - NOW - i);
        break;
      }
      counters = d.counters;
      admitted++;
    }
    expect(admitted).toBe(4);
    expect(counters.dayTokens).toBe(1_200);
    expect(counters.dayTokens - 1_000).toBeLessThan(300);
  });
});

describe('currentCounters', () => {
  it.each([
    ['all current', current(1, 2, 3), current(1, 2, 3)],
    ['empty', EMPTY_COUNTERS, current(0, 0, 0)],
    ['past minute', with_(current(1, 2, 3), { minuteId: MINUTE_ID - 1 }), current(0, 2, 3)],
    ['past day', with_(current(1, 2, 3), { dayId: DAY_ID - 1 }), current(1, 0, 3)],
    ['past month', with_(current(1, 2, 3), { monthId: MONTH_ID - 1 }), current(1, 2, 0)],
    ['future minute', with_(current(1, 2, 3), { minuteId: MINUTE_ID + 1 }), current(0, 2, 3)],
  ])('%s', (_name, stored, expected) => {
    expect(currentCounters(stored, limitWindows(NOW))).toEqual(expected);
  });
});

interface SettleRow {
  name: string;
  counters: LimitCounters;
  charge: LimitCharge;
  actual: number;
  expected: LimitCounters;
}

const settleRows: SettleRow[] = [
  {
    name: 'true-up upwards',
    counters: current(3, 5_000, 20_000),
    charge: { tokens: 1_000, dayId: DAY_ID, monthId: MONTH_ID },
    actual: 1_500,
    expected: current(3, 5_500, 20_500),
  },
  {
    name: 'true-up downwards',
    counters: current(3, 5_000, 20_000),
    charge: { tokens: 1_000, dayId: DAY_ID, monthId: MONTH_ID },
    actual: 400,
    expected: current(3, 4_400, 19_400),
  },
  {
    name: 'actual equal to the estimate changes nothing',
    counters: current(3, 5_000, 20_000),
    charge: { tokens: 1_000, dayId: DAY_ID, monthId: MONTH_ID },
    actual: 1_000,
    expected: current(3, 5_000, 20_000),
  },
  {
    name: 'actual 0 gives the whole reservation back',
    counters: current(3, 5_000, 20_000),
    charge: { tokens: 1_000, dayId: DAY_ID, monthId: MONTH_ID },
    actual: 0,
    expected: current(3, 4_000, 19_000),
  },
  {
    name: 'charge from a past day: only the month is trued up',
    counters: current(3, 5_000, 20_000),
    charge: { tokens: 1_000, dayId: DAY_ID - 1, monthId: MONTH_ID },
    actual: 1_500,
    expected: current(3, 5_000, 20_500),
  },
  {
    name: 'charge from a past day and month: nothing changes',
    counters: current(3, 5_000, 20_000),
    charge: { tokens: 1_000, dayId: DAY_ID - 1, monthId: MONTH_ID - 1 },
    actual: 1_500,
    expected: current(3, 5_000, 20_000),
  },
  {
    name: 'charge from a past month, same day number: only the day is trued up',
    counters: current(3, 5_000, 20_000),
    charge: { tokens: 1_000, dayId: DAY_ID, monthId: MONTH_ID - 1 },
    actual: 0,
    expected: current(3, 4_000, 20_000),
  },
  {
    name: 'null day and month ids: nothing changes',
    counters: current(3, 5_000, 20_000),
    charge: { tokens: 1_000, dayId: null, monthId: null },
    actual: 5_000,
    expected: current(3, 5_000, 20_000),
  },
  {
    name: 'null ids against empty counters (ids -1): nothing changes',
    counters: EMPTY_COUNTERS,
    charge: { tokens: 1_000, dayId: null, monthId: null },
    actual: 0,
    expected: EMPTY_COUNTERS,
  },
  {
    name: 'null day id, current month: only the month is trued up',
    counters: current(3, 5_000, 20_000),
    charge: { tokens: 1_000, dayId: null, monthId: MONTH_ID },
    actual: 250,
    expected: current(3, 5_000, 19_250),
  },
];

describe('settleCharge', () => {
  it.each(settleRows)('$name', ({ counters, charge, actual, expected }) => {
    const copy = structuredClone(counters);
    expect(settleCharge(counters, charge, actual)).toEqual(expected);
    expect(counters).toEqual(copy);
  });

  it('never touches the minute', () => {
    const counters = current(7, 5_000, 20_000);
    const settled = settleCharge(counters, { tokens: 10, dayId: DAY_ID, monthId: MONTH_ID }, 99);
    expect(settled.minuteId).toBe(MINUTE_ID);
    expect(settled.minuteRequests).toBe(7);
  });

  it('settling the admission with its estimate gives back the admitted counters', () => {
    const l = limits(10, 1_000, 10_000);
    const d = admitUnderLimits(l, current(1, 100, 1_000), 300, NOW);
    expect(d.ok).toBe(true);
    if (!d.ok) return;
    expect(settleCharge(d.counters, d.charge, 300)).toEqual(d.counters);
    expect(settleCharge(d.counters, d.charge, 50)).toEqual(current(2, 150, 1_050));
  });

  it('settling after the day rolled over leaves the new day alone', () => {
    const l = limits(null, 1_000, 10_000);
    const d = admitUnderLimits(l, current(0, 0, 0), 300, DAY_END - 1);
    expect(d.ok).toBe(true);
    if (!d.ok) return;
    // The next request, in the next day, moves the stored day on.
    const next = admitUnderLimits(l, d.counters, 200, DAY_END);
    expect(next.ok).toBe(true);
    if (!next.ok) return;
    expect(next.counters.dayId).toBe(DAY_ID + 1);
    expect(next.counters.dayTokens).toBe(200);
    expect(next.counters.monthTokens).toBe(500);
    const settled = settleCharge(next.counters, d.charge, 100);
    expect(settled.dayTokens).toBe(200);
    expect(settled.monthTokens).toBe(300);
  });
});

interface UndoRow {
  name: string;
  limits: TenantLimits;
  counters: LimitCounters;
  charge: LimitCharge;
  expected: LimitCounters;
}

const undoRows: UndoRow[] = [
  {
    name: 'rpm set: the request and the tokens are given back',
    limits: limits(10, 1_000, 10_000),
    counters: current(4, 300, 2_200),
    charge: { tokens: 200, dayId: DAY_ID, monthId: MONTH_ID },
    expected: current(3, 100, 2_000),
  },
  {
    name: 'rpm null: only the tokens are given back',
    limits: limits(null, 1_000, 10_000),
    counters: current(4, 300, 2_200),
    charge: { tokens: 200, dayId: DAY_ID, monthId: MONTH_ID },
    expected: current(4, 100, 2_000),
  },
  {
    name: 'rpm only: the request is given back, tokens untouched',
    limits: limits(10, null, null),
    counters: current(4, 300, 2_200),
    charge: { tokens: 200, dayId: null, monthId: null },
    expected: current(3, 300, 2_200),
  },
  {
    name: 'no limits: nothing changes',
    limits: NO_LIMITS,
    counters: current(4, 300, 2_200),
    charge: { tokens: 200, dayId: null, monthId: null },
    expected: current(4, 300, 2_200),
  },
  {
    name: 'day only: the day tokens are given back',
    limits: limits(null, 1_000, null),
    counters: current(4, 300, 2_200),
    charge: { tokens: 200, dayId: DAY_ID, monthId: null },
    expected: current(4, 100, 2_200),
  },
];

describe('undoAdmission', () => {
  it.each(undoRows)('$name', ({ limits, counters, charge, expected }) => {
    const copy = structuredClone(counters);
    expect(undoAdmission(counters, charge, limits)).toEqual(expected);
    expect(counters).toEqual(copy);
  });

  it.each([
    ['all limits', limits(10, 1_000, 10_000)],
    ['rpm only', limits(10, null, null)],
    ['day only', limits(null, 1_000, null)],
    ['month only', limits(null, null, 10_000)],
    ['day and month', limits(null, 1_000, 10_000)],
    ['no limits', NO_LIMITS],
  ])('admit then undo restores current stored counters (%s)', (_name, l) => {
    const stored = current(2, 400, 5_000);
    const d = admitUnderLimits(l, stored, 250, NOW);
    expect(d.ok).toBe(true);
    if (!d.ok) return;
    expect(undoAdmission(d.counters, d.charge, l)).toEqual(stored);
  });

  it('admit then undo from past windows leaves the windows moved on at zero', () => {
    const l = limits(10, 1_000, 10_000);
    const stored = {
      minuteId: MINUTE_ID - 1,
      minuteRequests: 10,
      dayId: DAY_ID - 1,
      dayTokens: 1_000,
      monthId: MONTH_ID - 1,
      monthTokens: 10_000,
    };
    const d = admitUnderLimits(l, stored, 250, NOW);
    expect(d.ok).toBe(true);
    if (!d.ok) return;
    expect(undoAdmission(d.counters, d.charge, l)).toEqual(current(0, 0, 0));
  });
});

interface StandingRow {
  name: string;
  limits: TenantLimits;
  counters: LimitCounters;
  now?: number;
  expected: LimitsStanding;
}

const standingRows: StandingRow[] = [
  {
    name: 'no limits: nulls',
    limits: NO_LIMITS,
    counters: current(5, 5, 5),
    expected: { requests: null, tokens: null },
  },
  {
    name: 'requests only',
    limits: limits(10, null, null),
    counters: current(4, 5, 5),
    expected: {
      requests: { limit: 10, remaining: 6, resetMs: MINUTE_END - NOW },
      tokens: null,
    },
  },
  {
    name: 'requests over the limit clamp at 0',
    limits: limits(10, null, null),
    counters: current(14, 5, 5),
    expected: {
      requests: { limit: 10, remaining: 0, resetMs: MINUTE_END - NOW },
      tokens: null,
    },
  },
  {
    name: 'day only',
    limits: limits(null, 1_000, null),
    counters: current(0, 250, 99_999),
    expected: {
      requests: null,
      tokens: { limit: 1_000, remaining: 750, resetMs: DAY_END - NOW },
    },
  },
  {
    name: 'month only',
    limits: limits(null, null, 10_000),
    counters: current(0, 99_999, 2_500),
    expected: {
      requests: null,
      tokens: { limit: 10_000, remaining: 7_500, resetMs: MONTH_END - NOW },
    },
  },
  {
    name: 'day tighter',
    limits: limits(3, 1_000, 10_000),
    counters: current(1, 900, 1_000),
    expected: {
      requests: { limit: 3, remaining: 2, resetMs: MINUTE_END - NOW },
      tokens: { limit: 1_000, remaining: 100, resetMs: DAY_END - NOW },
    },
  },
  {
    name: 'month tighter',
    limits: limits(null, 1_000, 10_000),
    counters: current(0, 100, 9_950),
    expected: {
      requests: null,
      tokens: { limit: 10_000, remaining: 50, resetMs: MONTH_END - NOW },
    },
  },
  {
    name: 'tie: the month binds',
    limits: limits(null, 1_000, 10_000),
    counters: current(0, 700, 9_700),
    expected: {
      requests: null,
      tokens: { limit: 10_000, remaining: 300, resetMs: MONTH_END - NOW },
    },
  },
  {
    name: 'tie at 0 (both overspent by different amounts): the month binds',
    limits: limits(null, 1_000, 10_000),
    counters: current(0, 5_000, 10_001),
    expected: {
      requests: null,
      tokens: { limit: 10_000, remaining: 0, resetMs: MONTH_END - NOW },
    },
  },
  {
    name: 'a month limit below the day limit binds with a fresh month',
    limits: limits(null, 1_000, 500),
    counters: current(0, 0, 0),
    expected: {
      requests: null,
      tokens: { limit: 500, remaining: 500, resetMs: MONTH_END - NOW },
    },
  },
  {
    name: 'resetMs at the first ms of a month is the whole month',
    limits: limits(1, 1, 1),
    counters: {
      minuteId: Date.UTC(2024, 1, 1) / MINUTE_MS,
      minuteRequests: 0,
      dayId: Date.UTC(2024, 1, 1) / DAY_MS,
      dayTokens: 1,
      monthId: 2024 * 12 + 1,
      monthTokens: 0,
    },
    now: Date.UTC(2024, 1, 1),
    expected: {
      requests: { limit: 1, remaining: 1, resetMs: MINUTE_MS },
      tokens: { limit: 1, remaining: 0, resetMs: DAY_MS },
    },
  },
];

describe('limitsStanding', () => {
  it.each(standingRows)('$name', ({ limits, counters, now, expected }) => {
    const at = now ?? NOW;
    expect(limitsStanding(limits, counters, limitWindows(at), at)).toEqual(expected);
  });

  it('resetMs is the time to each window end, for every limit', () => {
    const at = Date.UTC(2024, 1, 29, 23, 59, 30);
    const s = limitsStanding(limits(1, 1_000, null), current(0, 0, 0), limitWindows(at), at);
    expect(s.requests?.resetMs).toBe(30_000);
    expect(s.tokens?.resetMs).toBe(30_000);
    const m = limitsStanding(limits(null, null, 1_000), current(0, 0, 0), limitWindows(at), at);
    expect(m.tokens?.resetMs).toBe(Date.UTC(2024, 2, 1) - at);
  });
});

describe('hasLimits', () => {
  it.each([
    [null, null, null, false],
    [10, null, null, true],
    [null, 1_000, null, true],
    [null, null, 10_000, true],
    [10, 1_000, null, true],
    [10, null, 10_000, true],
    [null, 1_000, 10_000, true],
    [10, 1_000, 10_000, true],
    [0, null, null, true],
    [null, 0, null, true],
    [null, null, 0, true],
  ])('rpm %s, day %s, month %s -> %s', (rpm, day, month, expected) => {
    expect(hasLimits(limits(rpm, day, month))).toBe(expected);
  });

  it('NO_LIMITS has none', () => {
    expect(hasLimits(NO_LIMITS)).toBe(false);
  });
});
