import { describe, expect, it } from 'vitest';
import type { AdminSample, SeenAction } from '../src/load/admin.js';
import { AdminPoller, parseAdminState } from '../src/load/admin.js';
import type { RequestRecord } from '../src/load/client.js';
import { promptText } from '../src/load/client.js';
import { renderPlain, renderTable } from '../src/load/live.js';
import { checks, runCharts, sweepCharts } from '../src/load/report.js';
import {
  analyzeSweep,
  computeSeries,
  type SweepPoint,
  summarize,
} from '../src/load/report-data.js';
import type { RunProgress, RunResult } from '../src/load/runner.js';

/** A request: tenant, start, outcome; ok ones have TTFT and tokens streamed to endS. */
function rec(
  tenant: number,
  startS: number,
  outcome: RequestRecord['outcome'],
  extra: Partial<RequestRecord> = {},
): RequestRecord {
  const ok = outcome === 'ok';
  return {
    tenant,
    seq: 0,
    target: 0,
    scheduledS: startS,
    startS,
    endS: extra.endS ?? startS + (ok ? 2 : 0.01),
    status: ok ? 200 : outcome === 'dropped' ? 429 : 500,
    outcome,
    ...(outcome === 'dropped' ? { dropReason: 'queue_ttl' } : {}),
    ...(ok ? { ttftMs: 100 } : {}),
    e2eMs: ok ? 2_000 : 10,
    promptTokens: 10,
    outputTokens: ok ? 20 : 0,
    maxTokens: 20,
    ...extra,
  };
}

function sample(t: number, budget: number, inflight: number, cap: number | null): AdminSample {
  return {
    t,
    mode: 'redis',
    budget,
    inflight,
    waiting: 0,
    leader: 'r1',
    replicas: 3,
    tenants: {},
    capPerWorker: cap,
    controllerEnabled: cap !== null,
    windowP99S: null,
  };
}

function action(tick: number, t: number, kind: string, capAfter: number): SeenAction {
  return {
    tick,
    t,
    kind,
    code: kind,
    reason: '',
    capBefore: 0,
    capAfter,
    budget: capAfter * 2,
    p99S: 0.5,
  };
}

/** 10 s run: tenant 0 sends 1/s all ok (TTFT 100 ms, one of 10 at 900 ms); tenant 1 sends 2/s, half dropped. */
function synthetic(): RunResult {
  const requests: RequestRecord[] = [];
  for (let s = 0; s < 10; s++) {
    requests.push(rec(0, s + 0.5, 'ok', s === 7 ? { ttftMs: 900 } : {}));
    requests.push(rec(1, s + 0.2, 'ok', { ttftMs: 300 }));
    requests.push(rec(1, s + 0.7, 'dropped'));
  }
  return {
    label: 'synthetic',
    scenario: 'unit',
    startedAt: new Date(0).toISOString(),
    durationS: 10,
    seed: 1,
    targets: ['http://127.0.0.1:1'],
    tenants: [
      { name: 'paying', sloClass: 'standard', weight: 2 },
      { name: 'free', sloClass: 'batch', weight: 1 },
    ],
    targetP99TtftS: 0.5,
    capacityTokensPerS: 40,
    requests,
    admin: [sample(0.5, 32, 10, 16), sample(1.5, 34, 20, 17), sample(2.5, 34, 30, 17)],
    actions: [action(1, 1.5, 'increase', 17), action(2, 2.5, 'hold', 17)],
    stoppedEarly: false,
    meta: {},
  };
}

describe('report data', () => {
  it('summarizes per tenant over a window', () => {
    const s = summarize(synthetic(), { fromS: 0, toS: 10 });
    const [paying, free] = s.tenants;
    expect(paying).toMatchObject({
      offered: 10,
      admitted: 10,
      completed: 10,
      dropped: 0,
      dropPct: 0,
    });
    expect(paying?.ttftP50Ms).toBe(100);
    expect(paying?.ttftP99Ms).toBe(900);
    expect(free).toMatchObject({
      offered: 20,
      admitted: 10,
      completed: 10,
      dropped: 10,
      dropPct: 50,
    });
    expect(free?.dropReasons).toEqual({ queue_ttl: 10 });
    expect(s.total.offered).toBe(30);
    // Tokens: each ok request streams 20 tokens evenly from its first token to its end
    // (start + 2 s). Paying's requests of 8.5 s and 9.5 s (first tokens at 8.6 s and 9.6 s)
    // are 1.4 s and 0.4 s of their 1.9 s inside the window.
    const payingTokens = 8 * 20 + (20 * (1.4 + 0.4)) / 1.9;
    expect(paying?.tokensPerS).toBeCloseTo(payingTokens / 10, 6);
    expect(s.capacityPct).toBeCloseTo((100 * s.tokensPerS) / 40, 6);
    expect(s.actions).toEqual({ increase: 1, decrease: 0, hold: 1 });
    expect(s.budget).toEqual({ min: 32, max: 34, last: 34 });
    expect(s.lastCapPerWorker).toBe(17);
  });

  it('a later window counts only the requests that started in it', () => {
    const s = summarize(synthetic(), { fromS: 5, toS: 10 });
    expect(s.tenants[0]?.offered).toBe(5);
    expect(s.tenants[1]?.offered).toBe(10);
  });

  it('computes per-second series', () => {
    const series = computeSeries(synthetic(), 1, 5);
    const [paying, free] = series.tenants;
    expect(paying?.submitted.slice(0, 10)).toEqual(new Array(10).fill(1));
    expect(free?.submitted.slice(0, 10)).toEqual(new Array(10).fill(2));
    expect(free?.admitted.slice(0, 10)).toEqual(new Array(10).fill(1));
    expect(free?.dropped.slice(0, 10)).toEqual(new Array(10).fill(1));
    // p99 TTFT over a trailing 5 s window: the 900 ms sample (first token at 8.4 s) shows in
    // buckets 8.. (windows ending at 9 s and later), not before. The series runs to the last
    // end (11.5 s): 12 buckets.
    expect(series.times).toHaveLength(12);
    expect(paying?.p99TtftMs[7]).toBe(100);
    expect(paying?.p99TtftMs[8]).toBe(900);
    expect(paying?.p99TtftMs[11]).toBe(900);
    expect(paying?.p99TtftMs[0]).toBe(100);
    // Tokens are conserved between the series and the records.
    const total = series.tokensPerS.reduce((a, b) => a + b, 0);
    expect(total).toBeCloseTo(20 * 20, 6);
    expect(series.completedPerS.reduce((a, b) => a + b, 0)).toBe(20);
    expect(series.budget).toEqual([
      [0.5, 32],
      [1.5, 34],
      [2.5, 34],
    ]);
    expect(series.capPerWorker.map((p) => p[1])).toEqual([16, 17, 17]);
    expect(series.actions.map((a) => a.kind)).toEqual(['increase', 'hold']);
  });

  it('checks the target for protected classes and names the sheddable ones', () => {
    const lines = checks(summarize(synthetic(), { fromS: 0, toS: 10 }));
    expect(lines[0]).toMatch(
      /paying \(standard, protected\): p99 TTFT 900ms ABOVE target 500 ms; dropped 0.00%/,
    );
    expect(lines[1]).toMatch(/free \(batch, sheddable\)/);
    expect(lines[2]).toMatch(/of the pods' capacity/);
  });

  it('renders every panel as SVG (one per tenant, pool, controller, TTFT, throughput)', () => {
    const charts = runCharts(synthetic());
    expect(charts.map((c) => c.file)).toEqual([
      'tenant-paying.svg',
      'tenant-free.svg',
      'pool.svg',
      'controller.svg',
      'ttft.svg',
      'throughput.svg',
    ]);
    for (const c of charts) expect(c.svg.startsWith('<svg')).toBe(true);
  });

  it('analyzes a sweep: best static, the U, controller-on verdicts', () => {
    const point = (
      cap: number,
      controller: 'off' | 'on',
      p99: number,
      tps: number,
      endCap = cap,
    ): SweepPoint => {
      const s = summarize(synthetic(), { fromS: 0, toS: 10 });
      return {
        cap,
        controller,
        endCap,
        summary: { ...s, tokensPerS: tps, total: { ...s.total, ttftP99Ms: p99 } },
      };
    };
    const points = [
      point(4, 'off', 1_600, 150),
      point(16, 'off', 1_000, 400),
      point(64, 'off', 900, 550),
      point(256, 'off', 1_500, 640),
      point(4, 'on', 1_000, 560, 60),
      point(256, 'on', 1_200, 600, 70),
    ];
    const a = analyzeSweep(points);
    expect(a.caps).toEqual([4, 16, 64, 256]);
    expect(a.best).toEqual({ cap: 64, p99Ms: 900, tokensPerS: 550 });
    expect(a.uCurve?.isU).toBe(true);
    expect(a.uCurve?.lowRatio).toBeCloseTo(1_600 / 900);
    expect(a.verdicts).toHaveLength(2);
    expect(a.verdicts[0]).toMatchObject({ cap: 4, withinP99: true, noLessThroughput: true });
    expect(a.verdicts[1]).toMatchObject({ cap: 256, withinP99: false, noLessThroughput: true });
    expect(a.verdicts[1]?.p99Ratio).toBeCloseTo(1_200 / 900);
    const flat = analyzeSweep([
      point(4, 'off', 900, 1),
      point(8, 'off', 1_000, 1),
      point(16, 'off', 2_000, 1),
    ]);
    expect(flat.uCurve?.isU).toBe(false);
    expect(sweepCharts(a, 1).map((c) => c.file)).toContain('sweep-ttft.svg');
  });

  it('reads /admin/state', () => {
    const { sample: s, actions } = parseAdminState(
      {
        mode: 'redis',
        budget: 64,
        inflight: 12,
        waiting: 3,
        leader: 'r2',
        replicas: [{}, {}, {}],
        tenants: [{ tenant: 'paying', inflight: 10, waiting: 1 }],
        pods: [
          { name: 'pod-0', cap: 16, inflight: 7, healthy: true },
          { name: 'pod-1', cap: 16, inflight: 5, healthy: true },
        ],
        controller: {
          enabled: true,
          cap_per_worker: 32,
          window: { p99_ttft_s: 0.4 },
          actions: [
            {
              tick: 9,
              kind: 'increase',
              code: 'below_band',
              reason: 'r',
              capBefore: 31,
              capAfter: 32,
              budget: 64,
              p99S: 0.4,
            },
          ],
        },
      },
      3.5,
    );
    expect(s).toMatchObject({
      t: 3.5,
      budget: 64,
      inflight: 12,
      waiting: 3,
      leader: 'r2',
      replicas: 3,
      capPerWorker: 32,
      windowP99S: 0.4,
    });
    expect(s.tenants.paying).toEqual({ inflight: 10, waiting: 1 });
    expect([s.podCap, s.podInflight]).toEqual([32, 12]);
    expect(parseAdminState({ budget: 8 }, 1).sample.podCap).toBeUndefined();
    expect(actions[0]).toMatchObject({ tick: 9, kind: 'increase', capAfter: 32, t: 3.5 });
  });

  it('renders the live table and the plain line', () => {
    const admin = new AdminPoller([], 'x', () => 0);
    admin.samples.push(sample(1, 64, 60, 32));
    admin.actions.set(3, action(3, 1, 'decrease', 24));
    const progress: RunProgress = {
      elapsedS: 10,
      durationS: 20,
      outstanding: 5,
      phase: 'running',
      admin,
      tenants: [
        {
          name: 'paying',
          offered: 10,
          admitted: 9,
          dropped: 1,
          errors: 0,
          completed: 8,
          ttft: [
            [9, 100],
            [9.5, 300],
          ],
        },
      ],
    };
    const table = renderTable(progress, 'demo');
    expect(table[0]).toMatch(/demo\s+\[#{12}-{12}\]\s+10\/20s\s+open 5/);
    expect(table[2]).toMatch(/paying\s+10\s+9\s+1\s+0\s+100ms\s+300ms/);
    expect(table[3]).toMatch(/budget 64\s+in flight 60/);
    expect(table[4]).toMatch(/decrease cap 0->24/);
    expect(renderPlain(progress, 'demo')).toMatch(/^\[demo 10\/20s\] paying off 10 adm 9 drop 1/);
  });

  it('builds prompts the shared token estimate counts exactly', () => {
    for (const tokens of [8, 12, 100]) {
      const text = promptText(tokens, 't0-1');
      const rendered = `<|user|>\n${text}\n<|assistant|>\n`;
      expect(Math.ceil(rendered.length / 4)).toBe(tokens);
    }
  });
});
