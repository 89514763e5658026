import { Counter, Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { BoundCounter } from '../src/bound-counter.js';
import { BoundHistogram } from '../src/bound-histogram.js';
import { LATENCY_BUCKETS, metricsText } from '../src/metrics.js';

const NAME = 'fairgate_test_seconds';
const HELP = 'A latency.';
const LABELS = ['tenant', 'class'];

/** The same observations in a prom-client Histogram and a BoundHistogram, each in its own registry. */
function pair(
  observations: ReadonlyArray<[Record<string, string>, number]>,
  defaults: Record<string, string> = { replica: 'r1', pool: 'main' },
) {
  const buckets = LATENCY_BUCKETS;
  const reference = new Registry();
  reference.setDefaultLabels(defaults);
  const prom = new Histogram({
    name: NAME,
    help: HELP,
    labelNames: LABELS,
    buckets,
    registers: [reference],
  });
  const bound = new Registry();
  bound.setDefaultLabels(defaults);
  const ours = new BoundHistogram(NAME, HELP, LABELS, buckets, bound);
  for (const [labels, value] of observations) {
    prom.labels(labels).observe(value);
    ours.labels(labels).observe(value);
  }
  return { reference, bound, ours };
}

/** The same text and JSON (prom-client's values also carry `exemplar`: null / undefined). */
async function expectSameExport(bound: Registry, reference: Registry) {
  expect(await bound.metrics()).toBe(await reference.metrics());
  const withoutExemplars = (await reference.getMetricsAsJSON()).map((metric) => ({
    ...metric,
    values: metric.values.map((value) => {
      const { exemplar: _exemplar, ...rest } = value as typeof value & { exemplar?: unknown };
      return rest;
    }),
  }));
  expect(await bound.getMetricsAsJSON()).toEqual(withoutExemplars);
}

const A = { tenant: 'a', class: 'standard' };
const B = { tenant: 'b', class: 'batch' };

describe('BoundHistogram', () => {
  it.each([
    ['no observation', []],
    ['one value inside a bucket', [[A, 0.12]]],
    ['a value exactly on a bound', [[A, 0.1]]],
    [
      'zero and a negative value (the first bucket)',
      [
        [A, 0],
        [A, -1],
      ],
    ],
    [
      'above the last bound (+Inf only)',
      [
        [A, 61],
        [A, 1e9],
      ],
    ],
    [
      'two series, interleaved',
      [
        [A, 0.003],
        [B, 2],
        [A, 0.003],
        [B, 0.0009],
        [A, 59.9],
      ],
    ],
    ['label values that need escaping', [[{ tenant: 'q"uo\\te', class: 'new\nline' }, 0.5]]],
  ] as Array<[string, Array<[Record<string, string>, number]>]>)(
    'renders the same text as prom-client: %s',
    async (_case, observations) => {
      const { reference, bound } = pair(observations);
      await expectSameExport(bound, reference);
    },
  );

  it('aggregates across registries as prom-client does (metricsText of several pools)', async () => {
    const one = pair(
      [
        [A, 0.2],
        [B, 3],
      ],
      { replica: 'r1', pool: 'one' },
    );
    const two = pair(
      [
        [A, 0.2],
        [A, 0.0001],
      ],
      { replica: 'r1', pool: 'two' },
    );
    expect(await metricsText([one.bound, two.bound])).toBe(
      await metricsText([one.reference, two.reference]),
    );
  });

  it.each([[[5, 0.1, 1]], [[0.1, 0.1, 1]]])(
    'refuses buckets that are not increasing: %j',
    (buckets) => {
      expect(() => new BoundHistogram(NAME, HELP, LABELS, buckets, new Registry())).toThrow(
        /buckets must be increasing/,
      );
    },
  );

  it('observe(labels, value) is the same as labels(labels).observe(value)', async () => {
    const { reference, bound, ours } = pair([[A, 0.4]]);
    ours.observe(A, 0.4);
    const extra = new Registry();
    extra.setDefaultLabels({ replica: 'r1', pool: 'main' });
    const twice = new BoundHistogram(NAME, HELP, LABELS, LATENCY_BUCKETS, extra);
    twice.labels(A).observe(0.4);
    twice.labels(A).observe(0.4);
    expect(await bound.metrics()).toBe(await extra.metrics());
    expect(await bound.metrics()).not.toBe(await reference.metrics());
  });

  it.each([
    ['a missing label', { tenant: 'a' }],
    ['an unknown label', { tenant: 'a', class: 'x', pod: 'p' }],
    ['a wrong label', { tenant: 'a', klass: 'x' }],
  ])('refuses %s and counts nothing', async (_case, labels) => {
    const { bound, ours } = pair([]);
    const before = await bound.metrics();
    expect(() => ours.labels(labels)).toThrow(/labels must be exactly tenant, class/);
    expect(await bound.metrics()).toBe(before);
  });

  it.each([Number.NaN, Number.POSITIVE_INFINITY])(
    'refuses %s and counts nothing',
    async (value) => {
      const { bound, ours } = pair([[A, 0.1]]);
      const before = await bound.metrics();
      expect(() => ours.labels(A).observe(value)).toThrow(/not a valid number/);
      expect(await bound.metrics()).toBe(before);
    },
  );

  it('a series bound but never observed is not exported, as in prom-client', async () => {
    const { reference, bound, ours } = pair([[A, 0.2]]);
    ours.labels(B);
    await expectSameExport(bound, reference);
  });

  it('reset() zeroes every series and bound series keep counting', async () => {
    const { bound, ours } = pair([]);
    const series = ours.labels(A);
    series.observe(0.2);
    ours.reset();
    series.observe(0.3);
    const fresh = pair([[A, 0.3]]);
    expect(await bound.metrics()).toBe(await fresh.reference.metrics());
  });
});

const COUNTER = 'fairgate_test_total';
const OUTCOME_LABELS = ['tenant', 'class', 'outcome'];

/** The same increments in a prom-client Counter and a BoundCounter, each in its own registry. */
function counterPair(
  increments: ReadonlyArray<[Record<string, string>, number | undefined]>,
  defaults: Record<string, string> = { replica: 'r1', pool: 'main' },
) {
  const reference = new Registry();
  reference.setDefaultLabels(defaults);
  const prom = new Counter({
    name: COUNTER,
    help: HELP,
    labelNames: OUTCOME_LABELS,
    registers: [reference],
  });
  const bound = new Registry();
  bound.setDefaultLabels(defaults);
  const ours = new BoundCounter(COUNTER, HELP, OUTCOME_LABELS, bound);
  for (const [labels, value] of increments) {
    prom.labels(labels).inc(value);
    ours.labels(labels).inc(value);
  }
  return { reference, bound, ours, prom };
}

const DONE = { ...A, outcome: 'completed' };
const GONE = { ...B, outcome: 'cancelled' };

describe('BoundCounter', () => {
  it.each([
    ['no increment', []],
    ['one increment', [[DONE, undefined]]],
    [
      'by given amounts, zero included',
      [
        [DONE, 2],
        [DONE, 0],
        [DONE, 0.5],
      ],
    ],
    [
      'two series, interleaved',
      [
        [DONE, undefined],
        [GONE, undefined],
        [DONE, 3],
      ],
    ],
    [
      'label values that need escaping',
      [[{ tenant: 'q"uo\\te', class: 'new\nline', outcome: 'x' }, undefined]],
    ],
  ] as Array<[string, Array<[Record<string, string>, number | undefined]>]>)(
    'renders the same text and JSON as prom-client: %s',
    async (_case, increments) => {
      const { reference, bound } = counterPair(increments);
      await expectSameExport(bound, reference);
    },
  );

  it('aggregates across registries as prom-client does (metricsText of several pools)', async () => {
    const one = counterPair(
      [
        [DONE, 1],
        [GONE, 2],
      ],
      { replica: 'r1', pool: 'one' },
    );
    const two = counterPair([[DONE, 5]], { replica: 'r1', pool: 'two' });
    expect(await metricsText([one.bound, two.bound])).toBe(
      await metricsText([one.reference, two.reference]),
    );
  });

  it('inc(labels, value) is the same as labels(labels).inc(value)', async () => {
    const { reference, ours, bound } = counterPair([[DONE, 2]]);
    const other = counterPair([]);
    other.ours.inc(DONE, 2);
    expect(await other.bound.metrics()).toBe(await reference.metrics());
    ours.inc(DONE);
    expect(await bound.metrics()).not.toBe(await reference.metrics());
  });

  it.each([
    ['a missing label', { tenant: 'a', class: 'x' }],
    ['an unknown label', { tenant: 'a', class: 'x', outcome: 'y', pod: 'p' }],
  ])('refuses %s and counts nothing', async (_case, labels) => {
    const { bound, ours } = counterPair([]);
    const before = await bound.metrics();
    expect(() => ours.labels(labels)).toThrow(/labels must be exactly tenant, class, outcome/);
    expect(await bound.metrics()).toBe(before);
  });

  it.each([
    [Number.NaN, /not a valid number/],
    [Number.POSITIVE_INFINITY, /not a valid number/],
    [-1, /not possible to decrease a counter/],
  ])('refuses %s and counts nothing', async (value, message) => {
    const { bound, ours } = counterPair([[DONE, 1]]);
    const before = await bound.metrics();
    expect(() => ours.labels(DONE).inc(value)).toThrow(message);
    expect(await bound.metrics()).toBe(before);
  });

  it('a series bound but never incremented is not exported, one incremented by 0 is', async () => {
    const { reference, bound, ours } = counterPair([[DONE, 0]]);
    ours.labels(GONE);
    await expectSameExport(bound, reference);
  });

  it('after reset() nothing is exported until a series counts again, as in prom-client', async () => {
    const { reference, bound, ours, prom } = counterPair([[DONE, 3]]);
    ours.reset();
    prom.reset();
    await expectSameExport(bound, reference);
  });

  it('reset() zeroes every series and bound series keep counting', async () => {
    const { bound, ours } = counterPair([]);
    const series = ours.labels(DONE);
    series.inc(4);
    ours.reset();
    series.inc();
    expect(await bound.metrics()).toBe(await counterPair([[DONE, 1]]).reference.metrics());
  });
});
