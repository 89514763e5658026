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
