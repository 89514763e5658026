import { estimateTextTokens } from '@fairgate/openai';
import { createRng } from '@fairgate/runtime';
import { describe, expect, it } from 'vitest';
import {
  arrivalTimes,
  buildSchedule,
  drawLength,
  expectedArrivals,
  rateFunction,
} from '../src/load/arrivals.js';
import { conversationMessages } from '../src/load/conversations.js';
import { type ArrivalSpec, parseScenario } from '../src/load/scenario.js';
import { percentile } from '../src/load/stats.js';

/** Count of arrivals in [a, b). */
const countIn = (times: number[], a: number, b: number) =>
  times.filter((t) => t >= a && t < b).length;

/** Tolerance for a Poisson count with mean m: 4 standard deviations (false failure ~6e-5). */
const within = (count: number, m: number) => Math.abs(count - m) <= 4 * Math.sqrt(Math.max(m, 1));

describe('arrival processes', () => {
  const D = 200;
  const cases: Array<[string, ArrivalSpec, Array<[number, number, number]>]> = [
    // [a, b, expected rate] windows to check
    [
      'poisson',
      { kind: 'poisson', rate: 20 },
      [
        [0, 200, 20],
        [0, 50, 20],
        [150, 200, 20],
      ],
    ],
    [
      'poisson in a window',
      { kind: 'poisson', rate: 30, start_s: 50, end_s: '75%' },
      [
        [0, 50, 0],
        [50, 150, 30],
        [150, 200, 0],
      ],
    ],
    [
      'onoff',
      { kind: 'onoff', rate: 40, on_s: 5, off_s: 15, start_off: false },
      [
        [0, 200, 10],
        [0, 5, 40],
        [5, 20, 0],
        [20, 25, 40],
        [45, 60, 0],
      ],
    ],
    [
      'ramp',
      { kind: 'ramp', from: 0, to: 40 },
      [
        [0, 200, 20],
        [0, 100, 10],
        [100, 200, 30],
      ],
    ],
    [
      'burst',
      { kind: 'burst', base_rate: 5, rate: 100, at_s: '50%', duration_s: 10 },
      [
        [0, 100, 5],
        [100, 110, 100],
        [110, 200, 5],
      ],
    ],
    [
      // rate(t) = 10 + 30 (1 - cos(2 pi t / 100)) / 2; its mean over [a, b) is
      // 25 - 15 (sin(2 pi b / 100) - sin(2 pi a / 100)) / (2 pi (b - a) / 100).
      'diurnal',
      { kind: 'diurnal', base_rate: 10, peak_rate: 40, period_s: '50%' },
      [
        [0, 200, 25],
        [0, 100, 25],
        [0, 25, 25 - 15 / (Math.PI / 2)],
        [25, 75, 25 + 30 / Math.PI],
        [75, 125, 25 - 30 / Math.PI],
      ],
    ],
  ];

  it.each(cases)('%s: empirical rates within tolerance', (_name, spec, windows) => {
    const times = arrivalTimes(spec, D, createRng(42, 'test'));
    expect(times).toEqual([...times].sort((a, b) => a - b));
    for (const [a, b, r] of windows) {
      const m = r * (b - a);
      const n = countIn(times, a, b);
      expect(within(n, m), `${n} arrivals in [${a}, ${b}) against ${m} expected`).toBe(true);
    }
    // The numeric integral agrees with the windows' total.
    const total = expectedArrivals(spec, D);
    expect(within(times.length, total)).toBe(true);
  });

  it('poisson inter-arrival times are exponential (mean and coefficient of variation)', () => {
    const times = arrivalTimes({ kind: 'poisson', rate: 50 }, 400, createRng(3));
    const gaps = times.slice(1).map((t, i) => t - times[i]!);
    const mean = gaps.reduce((a, b) => a + b, 0) / gaps.length;
    const sd = Math.sqrt(gaps.reduce((a, g) => a + (g - mean) ** 2, 0) / gaps.length);
    expect(mean).toBeCloseTo(1 / 50, 3);
    expect(sd / mean).toBeGreaterThan(0.95);
    expect(sd / mean).toBeLessThan(1.05);
  });

  it('rate functions follow the spec', () => {
    const ramp = rateFunction({ kind: 'ramp', from: 10, to: 30, start_s: 0, end_s: 100 }, 100);
    expect(ramp.rate(50)).toBeCloseTo(20);
    expect(ramp.peak).toBe(30);
    const burst = rateFunction(
      { kind: 'burst', base_rate: 1, rate: 9, at_s: '10%', duration_s: '10%' },
      100,
    );
    expect([burst.rate(5), burst.rate(15), burst.rate(25)]).toEqual([1, 9, 1]);
  });

  // [name, spec, duration, [t, expected rate(t)]...]: the diurnal day shape, phase by phase.
  const day: Array<[string, ArrivalSpec, number, Array<[number, number]>]> = [
    [
      'base 10, peak 50, period 40 s',
      { kind: 'diurnal', base_rate: 10, peak_rate: 50, period_s: 40 },
      100,
      [
        [0, 10], // phase 0: the trough
        [10, 30], // phase 1/4: half way
        [20, 50], // phase 1/2: the peak
        [30, 30], // phase 3/4
        [40, 10], // a whole period: the trough again
        [60, 50], // and the next day's peak
      ],
    ],
    [
      'no base, period as a percentage',
      { kind: 'diurnal', base_rate: 0, peak_rate: 8, period_s: '50%' },
      60,
      [
        [0, 0],
        [7.5, 4],
        [15, 8],
        [22.5, 4],
        [30, 0],
      ],
    ],
    [
      'a window: phase 0 at start_s, silent outside',
      { kind: 'diurnal', base_rate: 2, peak_rate: 6, period_s: 20, start_s: 10, end_s: '80%' },
      50,
      [
        [5, 0],
        [10, 2],
        [15, 4],
        [20, 6],
        [25, 4],
        [30, 2],
        [39.9, 2 + (4 * (1 - Math.cos((2 * Math.PI * 29.9) / 20))) / 2],
        [40, 0],
      ],
    ],
    [
      'flat: base = peak is a constant rate',
      { kind: 'diurnal', base_rate: 7, peak_rate: 7, period_s: 10 },
      30,
      [
        [0, 7],
        [2.5, 7],
        [5, 7],
      ],
    ],
  ];

  it.each(day)('diurnal %s: rate by phase, peak', (_name, spec, duration, points) => {
    const { rate, peak } = rateFunction(spec, duration);
    for (const [t, expected] of points) {
      expect(rate(t), `rate(${t})`).toBeCloseTo(expected, 9);
    }
    if (spec.kind === 'diurnal') expect(peak).toBe(Math.max(spec.base_rate, spec.peak_rate));
    // Thinning needs rate <= peak everywhere.
    for (let t = 0; t < duration; t += 0.25) expect(rate(t)).toBeLessThanOrEqual(peak + 1e-9);
  });

  it('diurnal: mean over whole periods is (base + peak) / 2; seeded like every kind', () => {
    const spec: ArrivalSpec = { kind: 'diurnal', base_rate: 4, peak_rate: 36, period_s: 30 };
    expect(expectedArrivals(spec, 120)).toBeCloseTo(20 * 120, 0);
    const one = arrivalTimes(spec, 120, createRng(11, 'arrivals:x'));
    const two = arrivalTimes(spec, 120, createRng(11, 'arrivals:x'));
    const other = arrivalTimes(spec, 120, createRng(12, 'arrivals:x'));
    expect(two).toEqual(one);
    expect(other).not.toEqual(one);
    expect(within(one.length, 2_400)).toBe(true);
    // More arrivals around the peaks (15 s, 45 s, ...) than around the troughs (0, 30 s, ...).
    const peaks = [0, 1, 2, 3].reduce((n, k) => n + countIn(one, 30 * k + 10, 30 * k + 20), 0);
    const troughs = [0, 1, 2, 3].reduce(
      (n, k) => n + countIn(one, 30 * k, 30 * k + 5) + countIn(one, 30 * k + 25, 30 * k + 30),
      0,
    );
    expect(peaks).toBeGreaterThan(3 * troughs);
  });

  it('log-normal lengths: median, clamping', () => {
    const rng = createRng(9);
    const values = Array.from({ length: 20_000 }, () =>
      drawLength({ median: 100, sigma: 0.6, min: 1, max: 400 }, rng),
    );
    expect(percentile(values, 0.5)).toBeGreaterThan(95);
    expect(percentile(values, 0.5)).toBeLessThan(105);
    expect(Math.max(...values)).toBe(400);
    expect(Math.min(...values)).toBeGreaterThanOrEqual(1);
  });

  const scenario = (seed: number) =>
    parseScenario({
      name: 's',
      duration_s: 30,
      seed,
      tenants: [
        { name: 'a', key_ref: 'paying', arrival: { kind: 'poisson', rate: 10 } },
        { name: 'b', key_ref: 'free', arrival: { kind: 'onoff', rate: 20, on_s: 2, off_s: 3 } },
      ],
    });

  it('same seed, same schedule; another seed, another schedule', () => {
    const one = buildSchedule(scenario(5));
    const two = buildSchedule(scenario(5));
    expect(two).toEqual(one);
    expect(one.length).toBeGreaterThan(300);
    const other = buildSchedule(scenario(6));
    expect(other.map((a) => a.t)).not.toEqual(one.map((a) => a.t));
    // Sorted by time, both tenants present, per-tenant sequence numbers dense.
    expect(one.map((a) => a.t)).toEqual([...one.map((a) => a.t)].sort((x, y) => x - y));
    for (const tenant of [0, 1]) {
      const seqs = one.filter((a) => a.tenant === tenant).map((a) => a.seq);
      expect(seqs).toEqual(seqs.map((_, i) => i));
    }
  });

  it("a tenant's schedule does not depend on the other tenants", () => {
    const both = buildSchedule(scenario(5)).filter((a) => a.tenant === 0);
    const alone = buildSchedule(
      parseScenario({ name: 's', duration_s: 30, seed: 5, tenants: [scenario(5).tenants[0]] }),
    );
    expect(alone.map((a) => [a.t, a.promptTokens, a.outputTokens])).toEqual(
      both.map((a) => [a.t, a.promptTokens, a.outputTokens]),
    );
  });

  it('a diurnal tenant is seeded like any other: same seed, same schedule', () => {
    const diurnal = (seed: number) =>
      parseScenario({
        name: 'd',
        duration_s: 60,
        seed,
        tenants: [
          {
            name: 'day',
            key_ref: 'paying',
            arrival: { kind: 'diurnal', base_rate: 2, peak_rate: 30, period_s: '50%' },
          },
        ],
      });
    const one = buildSchedule(diurnal(3));
    expect(buildSchedule(diurnal(3))).toEqual(one);
    expect(buildSchedule(diurnal(4)).map((a) => a.t)).not.toEqual(one.map((a) => a.t));
    expect(within(one.length, 16 * 60)).toBe(true);
  });

  it('a tenant without arrival (the batch tenant) sends no live request', () => {
    const s = parseScenario({
      name: 'b',
      duration_s: 20,
      tenants: [
        { name: 'live', key_ref: 'paying', arrival: { kind: 'poisson', rate: 5 } },
        { name: 'bulk', key_ref: 'free' },
      ],
      batch: { tenant: 'bulk', lines: 10 },
    });
    const schedule = buildSchedule(s);
    expect(schedule.length).toBeGreaterThan(50);
    expect(schedule.every((a) => a.tenant === 0)).toBe(true);
  });

  it('refuses a schedule above limits.max_requests', () => {
    const s = parseScenario({
      name: 'big',
      duration_s: 100,
      limits: { max_requests: 1_000 },
      tenants: [{ name: 'a', key_ref: 'paying', arrival: { kind: 'poisson', rate: 100 } }],
    });
    expect(() => buildSchedule(s)).toThrow(/limits.max_requests/);
  });
});

describe('shared_prefix conversations', () => {
  const scenario = parseScenario({
    name: 'conv',
    duration_s: 30,
    tenants: [
      {
        name: 'chat',
        key_ref: 'paying',
        arrival: { kind: 'poisson', rate: 10 },
        prompt_tokens: { median: 20, sigma: 0, max: 64 },
        output_tokens: { median: 10, sigma: 0, max: 64 },
        shared_prefix: { system_prompts: 3, system_tokens: 200, users: 5, max_turns: 3 },
      },
    ],
  });
  const schedule = buildSchedule(scenario);
  const tenant = scenario.tenants[0] as (typeof scenario.tenants)[0] & {
    shared_prefix: NonNullable<(typeof scenario.tenants)[0]['shared_prefix']>;
  };

  it("numbers each user's turns, starting a new conversation after max_turns", () => {
    const byUser = new Map<number, Array<{ round: number; turn: number }>>();
    for (const arrival of schedule) {
      const at = arrival.conversation;
      expect(at).toBeDefined();
      const list = byUser.get(at!.user) ?? [];
      list.push({ round: at!.round, turn: at!.turn });
      byUser.set(at!.user, list);
    }
    expect([...byUser.keys()].every((u) => u >= 0 && u < 5)).toBe(true);
    for (const turns of byUser.values()) {
      turns.forEach((t, i) => {
        expect(t).toEqual({ round: Math.floor(i / 3), turn: i % 3 });
      });
    }
  });

  it('makes each turn start with the whole previous turn, and users share system prompts', () => {
    const text = (m: { content?: unknown }) => String(m.content);
    const prompt = (user: number, round: number, turn: number) =>
      conversationMessages(tenant, { user, round, turn }, 20).map(text).join('\n');
    const first = conversationMessages(tenant, { user: 1, round: 0, turn: 0 }, 20);
    const third = conversationMessages(tenant, { user: 1, round: 0, turn: 2 }, 20);
    expect(first.map((m) => m.role)).toEqual(['system', 'user']);
    expect(third.map((m) => m.role)).toEqual([
      'system',
      'user',
      'assistant',
      'user',
      'assistant',
      'user',
    ]);
    // Turn 2 repeats turn 1's messages, question included, then adds an answer and a question.
    const second = conversationMessages(tenant, { user: 1, round: 0, turn: 1 }, 20);
    expect(third.slice(0, 3).map(text)).toEqual(second.slice(0, 3).map(text));
    // Users 1 and 4 share system prompt 1 (4 mod 3); user 2 has another.
    expect(text(conversationMessages(tenant, { user: 4, round: 0, turn: 0 }, 20)[0]!)).toBe(
      text(first[0]!),
    );
    expect(prompt(2, 0, 0).slice(0, 50)).not.toBe(prompt(1, 0, 0).slice(0, 50));
    expect(estimateTextTokens(text(first[0]!))).toBeGreaterThanOrEqual(190);
  });
});
