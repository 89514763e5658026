import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DEFAULT_SLO_CLASSES, isSheddablePriority } from '@fairgate/gateway';
import { barChart, type LineSeries, lineChart, PALETTE } from './charts.js';
import {
  analyzeSweep,
  type BatchSummary,
  computeBatchSeries,
  computeSeries,
  computeServiceSeries,
  type ReportSeries,
  type RunSummary,
  type SweepAnalysis,
  type SweepPoint,
  summarize,
} from './report-data.js';
import type { RunResult } from './runner.js';
import { fmt, fmtMs } from './stats.js';

/**
 * Reports: results.json (everything measured), report.html (self-contained: tables and
 * inline SVG charts) and every chart as its own .svg file, all in one directory.
 */
export interface Chart {
  file: string;
  title: string;
  svg: string;
}

/** SLO-protected (not sheddable) by the scenario's class table, else the gateway's default. */
export function isProtected(
  sloClass: string,
  classes: Record<string, number> = DEFAULT_SLO_CLASSES,
): boolean {
  return !isSheddablePriority(classes[sloClass] ?? DEFAULT_SLO_CLASSES[sloClass] ?? 0);
}

/** The panels of one run: one per tenant, then pool, controller, TTFT, throughput. */
export function runCharts(result: RunResult, prefix = ''): Chart[] {
  const series = computeSeries(result, 1, 5);
  const panel: Panel = {
    result,
    series,
    prefix,
    label: result.label,
    pair: pairWith(series.times),
  };
  const charts: Chart[] = [
    ...tenantCharts(panel),
    poolChart(panel),
    controllerChart(panel),
    ttftChart(panel),
    throughputChart(panel),
  ];
  const backfill = batchChart(result, prefix);
  if (backfill) charts.push(backfill);
  const scaling = autoscaleChart(panel);
  if (scaling) charts.push(scaling);
  return charts;
}

/**
 * stack.autoscale: the pods the scaler listed, the signal it read (desired_pods), the pods
 * the gateways granted to and the budget in pods (budget / pod cap), beside the run's p99
 * TTFT (right axis would mix units: the TTFT panel is its own chart).
 */
function autoscaleChart({ result, prefix, label }: Panel): Chart | undefined {
  const timeline = result.scaler;
  if (!timeline || timeline.length === 0) return undefined;
  const podCap = Number((result.meta.stack as { pod_cap?: number } | undefined)?.pod_cap ?? 0);
  const live = result.admin.flatMap((s) =>
    s.livePods === undefined ? [] : [[s.t, s.livePods] as [number, number]],
  );
  return {
    file: `${prefix}autoscale.svg`,
    title: 'Pods, desired pods and budget',
    svg: lineChart({
      title: `Autoscale: pods against desired_pods (${label})`,
      subtitle:
        'desired_pods as the scaler read it; pods it listed in DNS; live pods and budget as /admin/state showed them',
      xName: 'seconds',
      yName: 'pods',
      yMin: 0,
      lines: [
        {
          name: 'desired_pods',
          data: timeline.map((s) => [s.t, s.desired]),
          color: '#dc2626',
          dash: 'dashed',
          step: true,
          width: 2,
        },
        {
          name: 'pods listed',
          data: timeline.map((s) => [s.t, s.pods]),
          color: '#111827',
          step: true,
          width: 2,
        },
        { name: 'live pods', data: live, color: '#16a34a', step: true },
        ...(podCap > 0
          ? [
              {
                name: `budget / ${podCap}`,
                data: result.admin.map((s) => [s.t, s.budget / podCap] as [number, number]),
                color: '#2563eb',
                dash: 'dotted' as const,
                step: true,
              },
            ]
          : []),
      ],
    }),
  };
}

/** What each panel of a run reads: the run, its series and the file prefix. */
interface Panel {
  result: RunResult;
  series: ReportSeries;
  prefix: string;
  label: string;
  /** [time, value rounded to 3 decimals] points of a per-second series. */
  pair: (values: Array<number | null>) => Array<[number, number | null]>;
}

function pairWith(times: number[]): Panel['pair'] {
  return (values) => values.map((v, i) => [times[i]!, v === null ? null : Number(v.toFixed(3))]);
}

/** Submitted, admitted and dropped per second, one panel per tenant that sent requests. */
function tenantCharts({ result, series, prefix, label, pair }: Panel): Chart[] {
  const charts: Chart[] = [];
  series.tenants.forEach((s, index) => {
    // A tenant that only submitted the batch sent no live request: no panel of zeros.
    if (s.name === result.batch?.tenant && !result.requests.some((r) => r.tenant === index)) return;
    charts.push({
      file: `${prefix}tenant-${slug(s.name)}.svg`,
      title: `${s.name}: submitted / admitted / dropped`,
      svg: lineChart({
        title: `${s.name}: submitted, admitted, dropped (${label})`,
        subtitle: 'requests per second, by the second they were sent',
        xName: 'seconds',
        yName: 'req/s',
        yMin: 0,
        lines: [
          {
            name: 'submitted',
            data: pair(s.submitted),
            color: '#6b7280',
            dash: 'dotted',
            width: 2.4,
          },
          {
            name: 'admitted',
            data: pair(s.admitted),
            color: '#16a34a',
            width: 2,
          },
          { name: 'dropped', data: pair(s.dropped), color: '#dc2626', dash: 'dashed', width: 1.6 },
        ],
      }),
    });
  });
  return charts;
}

function poolChart({ series, prefix, label }: Panel): Chart {
  return {
    file: `${prefix}pool.svg`,
    title: 'Budget and in-flight',
    svg: lineChart({
      title: `Budget and in flight (${label})`,
      subtitle: 'pool-wide, from /admin/state once a second',
      xName: 'seconds',
      yName: 'requests',
      lines: [
        { name: 'budget', data: series.budget, color: '#111827', step: true, width: 2 },
        { name: 'in flight', data: series.inflight, color: '#2563eb', area: true },
        { name: 'waiting', data: series.waiting, color: '#ea580c', dash: 'dashed' },
      ],
    }),
  };
}

function controllerChart({ series, prefix, label }: Panel): Chart {
  const acts = series.actions;
  return {
    file: `${prefix}controller.svg`,
    title: 'Controller actions',
    svg: lineChart({
      title: `Controller: cap per worker and actions (${label})`,
      subtitle: acts.length
        ? `${acts.filter((a) => a.kind === 'increase').length} increases, ${acts.filter((a) => a.kind === 'decrease').length} decreases, ${acts.filter((a) => a.kind === 'hold').length} holds`
        : 'no controller actions (controller off or no ticks)',
      xName: 'seconds',
      yName: 'cap per worker',
      lines: [{ name: 'cap per worker', data: series.capPerWorker, color: '#4b5563', step: true }],
      scatters: [
        {
          name: 'increase',
          data: acts.filter((a) => a.kind === 'increase').map((a) => [a.t, a.capAfter]),
          color: '#16a34a',
          symbol: 'triangle',
        },
        {
          name: 'decrease',
          data: acts.filter((a) => a.kind === 'decrease').map((a) => [a.t, a.capAfter]),
          color: '#dc2626',
          symbol: 'pin',
          size: 12,
        },
        {
          name: 'hold',
          data: acts.filter((a) => a.kind === 'hold').map((a) => [a.t, a.capAfter]),
          color: '#9ca3af',
          size: 4,
        },
      ],
    }),
  };
}

function ttftChart({ result, series, prefix, label, pair }: Panel): Chart {
  return {
    file: `${prefix}ttft.svg`,
    title: 'p99 TTFT against the target',
    svg: lineChart({
      title: `p99 TTFT against the target (${label})`,
      subtitle: 'client-side, first content token; trailing 5 s window',
      xName: 'seconds',
      yName: 'ms',
      yMin: 0,
      lines: series.tenants.map((s, i) => ({
        name: `${s.name} p99`,
        data: pair(s.p99TtftMs),
        color: PALETTE[i % PALETTE.length]!,
        width: 2,
      })),
      hlines:
        result.targetP99TtftS !== undefined
          ? [
              {
                name: `target ${result.targetP99TtftS * 1_000} ms`,
                y: result.targetP99TtftS * 1_000,
                color: '#dc2626',
              },
            ]
          : [],
    }),
  };
}

function throughputChart({ result, series, prefix, label, pair }: Panel): Chart {
  return {
    file: `${prefix}throughput.svg`,
    title: 'Throughput',
    svg: lineChart({
      title: `Throughput (${label})`,
      subtitle: 'output tokens per second (left), completed requests per second (right)',
      xName: 'seconds',
      yName: 'tokens/s',
      y2Name: 'req/s',
      yMin: 0,
      lines: [
        { name: 'tokens/s', data: pair(series.tokensPerS), color: '#2563eb', area: true, width: 2 },
        { name: 'completed/s', data: pair(series.completedPerS), color: '#16a34a', yAxis: 1 },
      ],
      hlines:
        result.capacityTokensPerS !== undefined
          ? [
              {
                name: `capacity ${result.capacityTokensPerS.toFixed(0)} tok/s`,
                y: result.capacityTokensPerS,
                color: '#111827',
              },
            ]
          : [],
    }),
  };
}

/**
 * "Batch backfill" (a run with a batch): live completions and batch lines completed per
 * second (left) and the pods' busy capacity with the live requests' share of it (right),
 * on one time axis, so the batch is seen filling the live load's troughs.
 */
export function batchChart(result: RunResult, prefix = ''): Chart | undefined {
  const bs = computeBatchSeries(result, 1);
  if (!bs) return undefined;
  const pair = (values: number[]): Array<[number, number | null]> =>
    values.map((v, i) => [bs.times[i]!, Number(v.toFixed(3))]);
  const round = (points: Array<[number, number]>): Array<[number, number | null]> =>
    points.map(([t, v]) => [Number(t.toFixed(2)), Number(v.toFixed(1))]);
  const marks = [
    ...(bs.submittedS !== undefined ? [{ name: 'batch submitted', x: bs.submittedS }] : []),
    ...(bs.linesEndedS !== undefined ? [{ name: 'batch lines done', x: bs.linesEndedS }] : []),
  ].map((m) => ({ ...m, x: Number(m.x.toFixed(2)), color: '#9333ea' }));
  const b = result.batch!;
  const failed = bs.batchFailedPerS.some((v) => v > 0);
  return {
    file: `${prefix}batch.svg`,
    title: 'Batch backfill',
    svg: lineChart({
      title: `Batch backfill (${result.label})`,
      subtitle: `batch of ${b.lines} lines (${b.tenant}): ${b.status}; busy capacity = in flight / the pods' caps`,
      xName: 'seconds',
      yName: 'per second',
      y2Name: '% busy',
      yMin: 0,
      y2Min: 0,
      lines: [
        {
          name: 'batch lines completed/s',
          data: pair(bs.batchCompletedPerS),
          color: '#9333ea',
          area: true,
          width: 1.6,
        },
        ...(failed
          ? [
              {
                name: 'batch lines failed/s',
                data: pair(bs.batchFailedPerS),
                color: '#dc2626',
                dash: 'dashed' as const,
              },
            ]
          : []),
        {
          name: 'interactive completed/s',
          data: pair(bs.interactiveCompletedPerS),
          color: '#16a34a',
          width: 2,
        },
        {
          name: 'busy capacity %',
          data: round(bs.busyPct),
          color: '#111827',
          yAxis: 1,
          width: 1.6,
        },
        {
          name: 'interactive share %',
          data: round(bs.interactiveBusyPct),
          color: '#2563eb',
          dash: 'dashed',
          yAxis: 1,
        },
      ],
      vlines: marks,
    }),
  };
}

/**
 * Each tenant's share of the weighted tokens served per 5 s window of a run, against its
 * share by weight.
 */
export function serviceShareChart(result: RunResult, prefix = ''): Chart {
  const series = computeServiceSeries(result, 5);
  const mid = series.bucketS / 2;
  const w = series.weights;
  const fair = [...new Set(series.fairSharePct.map((p) => Number(p.toFixed(1))))];
  return {
    file: `${prefix}service-share.svg`,
    title: 'Weighted-token share over time',
    svg: lineChart({
      title: `Weighted-token share per ${series.bucketS} s (${result.label})`,
      subtitle: `each tenant's share of input x${w.input} + output x${w.output} tokens served in the window (from the answers' usage)`,
      xName: 'seconds',
      yName: '% of weighted tokens',
      yMin: 0,
      lines: series.tenants.map((t, i) => ({
        name: t.name,
        data: t.sharePct.map(
          (v, k) =>
            [series.times[k]! + mid, v === null ? null : Number(v.toFixed(1))] as [
              number,
              number | null,
            ],
        ),
        color: PALETTE[i % PALETTE.length]!,
        width: 2,
      })),
      hlines: fair.map((y) => ({ name: `share by weight ${y}%`, y, color: '#6b7280' })),
    }),
  };
}

/**
 * Side-by-side comparison of two or more runs of one scenario (--baseline, compare:): each
 * run's weighted-token share over time, then p99 TTFT, drops and weighted-token share per
 * tenant.
 */
export function comparisonCharts(results: RunResult[], summaries: RunSummary[]): Chart[] {
  const names = results[0]?.tenants.map((t) => t.name) ?? [];
  const p99 = barChart({
    title: 'p99 TTFT per tenant',
    subtitle: results.map((r) => r.label).join(' vs '),
    categories: names,
    yName: 'ms',
    groups: summaries.map((s, i) => ({
      name: s.label,
      values: s.tenants.map((t) => (Number.isFinite(t.ttftP99Ms) ? Math.round(t.ttftP99Ms) : null)),
      color: PALETTE[i % PALETTE.length]!,
    })),
    hlines:
      results[0]?.targetP99TtftS !== undefined
        ? [{ name: 'target', y: results[0].targetP99TtftS * 1_000, color: '#dc2626' }]
        : [],
  });
  const drops = barChart({
    title: 'Dropped per tenant (%)',
    categories: names,
    yName: '%',
    groups: summaries.map((s, i) => ({
      name: s.label,
      values: s.tenants.map((t) => Number(t.dropPct.toFixed(1))),
      color: PALETTE[i % PALETTE.length]!,
    })),
  });
  const service = barChart({
    title: 'Weighted-token share per tenant (%)',
    subtitle: 'of the weighted tokens served in the measurement window',
    categories: names,
    yName: '%',
    groups: summaries.map((s, i) => ({
      name: s.label,
      values: s.service.tenants.map((t) => Number(t.sharePct.toFixed(1))),
      color: PALETTE[i % PALETTE.length]!,
    })),
  });
  return [
    ...results.map((r) => serviceShareChart(r, `${slug(r.label)}-`)),
    { file: 'compare-ttft.svg', title: 'p99 TTFT per tenant', svg: p99 },
    { file: 'compare-drops.svg', title: 'Drops per tenant', svg: drops },
    { file: 'compare-service.svg', title: 'Weighted-token share per tenant', svg: service },
  ];
}

export function sweepCharts(analysis: SweepAnalysis, targetS?: number): Chart[] {
  const cats = analysis.caps.map(String);
  const line = (
    pick: (p: SweepPoint) => number,
    name: string,
    points: Array<SweepPoint | undefined>,
    color: string,
  ): LineSeries => ({
    name,
    color,
    width: 2,
    data: points.map((p, i) => {
      const v = p ? pick(p) : Number.NaN;
      return [i, Number.isFinite(v) ? Number(v.toFixed(2)) : null];
    }),
  });
  const both = (pick: (p: SweepPoint) => number) => [
    line(pick, 'controller off (static cap)', analysis.off, '#dc2626'),
    line(pick, 'controller on (starting cap)', analysis.on, '#2563eb'),
  ];
  const best = analysis.best;
  const chart = (
    file: string,
    title: string,
    yName: string,
    pick: (p: SweepPoint) => number,
    hlines: Array<{ name: string; y: number; color?: string }> = [],
  ) => ({
    file,
    title,
    svg: lineChart({
      title,
      subtitle: 'measured over the last seconds of each run',
      xName: 'starting cap per worker',
      yName,
      categories: cats,
      lines: both(pick),
      hlines,
      yMin: 0,
    }),
  });
  const ttftLines = [
    ...(targetS !== undefined
      ? [{ name: `target ${targetS * 1_000} ms`, y: targetS * 1_000, color: '#111827' }]
      : []),
    ...(best
      ? [
          {
            name: `best static ${best.p99Ms.toFixed(0)} ms (cap ${best.cap})`,
            y: best.p99Ms,
            color: '#16a34a',
          },
        ]
      : []),
  ];
  return [
    chart(
      'sweep-ttft.svg',
      'p99 TTFT against the starting cap',
      'ms',
      (p) => p.summary.total.ttftP99Ms,
      ttftLines,
    ),
    chart(
      'sweep-e2e.svg',
      'p99 E2E latency against the starting cap',
      'ms',
      (p) => p.summary.total.e2eP99Ms,
    ),
    chart(
      'sweep-throughput.svg',
      'Throughput against the starting cap',
      'tokens/s',
      (p) => p.summary.tokensPerS,
    ),
    chart(
      'sweep-drops.svg',
      'Dropped against the starting cap',
      '% of offered',
      (p) => p.summary.total.dropPct,
    ),
    chart(
      'sweep-endcap.svg',
      'Cap per worker at the end of the run',
      'cap per worker',
      (p) => p.endCap,
    ),
  ];
}

const esc = (s: string) =>
  s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

function tenantTable(summary: RunSummary): string {
  const head = [
    'tenant',
    'class',
    'weight',
    'offered',
    'admitted',
    'completed',
    'dropped',
    'drop %',
    'drop reasons',
    'errors',
    'p50 TTFT',
    'p99 TTFT',
    'p99 E2E',
    'p50 ITL',
    'tokens/s',
  ];
  const row = (t: RunSummary['tenants'][number]) => [
    t.name,
    t.sloClass,
    t.weight ? String(t.weight) : '',
    String(t.offered),
    String(t.admitted),
    String(t.completed),
    String(t.dropped),
    fmt(t.dropPct, 1),
    Object.entries(t.dropReasons)
      .map(([k, v]) => `${k} ${v}`)
      .join(', '),
    String(t.errors + t.aborted + t.overflow),
    fmtMs(t.ttftP50Ms),
    fmtMs(t.ttftP99Ms),
    fmtMs(t.e2eP99Ms),
    fmtMs(t.itlP50Ms),
    fmt(t.tokensPerS, 0),
  ];
  const rows = [...summary.tenants.map(row), row(summary.total)];
  return `<table><thead><tr>${head.map((h) => `<th>${h}</th>`).join('')}</tr></thead><tbody>${rows
    .map((r) => `<tr>${r.map((c) => `<td>${esc(c)}</td>`).join('')}</tr>`)
    .join('')}</tbody></table>`;
}

function poolLine(s: RunSummary): string {
  const parts = [
    `throughput ${fmt(s.tokensPerS, 0)} tokens/s, ${fmt(s.completedPerS, 1)} req/s (${fmt(s.fromS, 0)}-${fmt(s.toS, 0)} s)`,
  ];
  if (s.capacityTokensPerS !== undefined)
    parts.push(
      `capacity ${fmt(s.capacityTokensPerS, 0)} tokens/s -> ${fmt(s.capacityPct ?? 0, 1)}% of capacity`,
    );
  if (s.budget) parts.push(`budget ${s.budget.min}..${s.budget.max} (last ${s.budget.last})`);
  if (s.lastCapPerWorker !== undefined)
    parts.push(`cap per worker at the end ${s.lastCapPerWorker}`);
  parts.push(
    `controller actions: ${s.actions.increase} increase, ${s.actions.decrease} decrease, ${s.actions.hold} hold`,
  );
  return parts.join('; ');
}

/**
 * The run's service in one line: each tenant's share of the weighted tokens, the first two
 * tenants' ratio (per unit of weight), requests served per tenant, throughput.
 */
export function serviceLine(s: RunSummary): string {
  const v = s.service;
  const shares = v.tenants.map((t) => `${t.name} ${fmt(t.sharePct, 1)}%`).join(', ');
  const ratio = v.ratio ? `; ${v.ratio.names.join(':')} ${fmt(v.ratio.value, 2)}` : '';
  const served = s.tenants.map((t) => `${t.name} ${t.completed}`).join(', ');
  return `weighted tokens (input x${v.weights.input} + output x${v.weights.output}): ${shares}${ratio}; requests served ${served}; ${fmt(s.tokensPerS, 0)} output tokens/s (${fmt(v.weightedTokensPerS, 0)} weighted tokens/s)`;
}

/** The batch's numbers as lines (the console summary and the report). */
export function batchText(b: BatchSummary): string[] {
  const s = (v: number | undefined, digits = 1) => (v === undefined ? '-' : `${fmt(v, digits)} s`);
  const p = (v: number | undefined) => (v === undefined ? '-' : `${fmt(v, 1)}%`);
  const out = [
    `batch ${b.id ?? '(not created)'} of ${b.tenant}: ${b.status}${b.timedOut ? ' (deadline passed: cancelled)' : ''}; ${b.lines} lines, ${b.completed} completed, ${b.failed} failed (request_counts total ${b.total})`,
    `batch times: submitted ${s(b.submittedS)}, in progress ${s(b.runningFromS)}, lines done ${s(b.linesEndedS)}, ended ${s(b.endedS)}; duration ${s(b.durationS)} (lines ran ${s(b.runningS)}, ${b.linesPerS === undefined ? '-' : fmt(b.linesPerS, 1)} lines/s)`,
    `busy capacity while the batch ran: mean ${p(b.meanBusyPct)} (interactive share ${p(b.meanInteractiveBusyPct)}); before it ${p(b.meanBusyPctBefore)}`,
  ];
  const w = (name: string, x: BatchSummary['interactive']['before']) =>
    x
      ? `${name} (${fmt(x.fromS, 0)}-${fmt(x.toS, 0)} s, ${x.completed} requests) p50 ${fmtMs(x.ttftP50Ms)} p99 ${fmtMs(x.ttftP99Ms)}`
      : `${name} -`;
  out.push(
    `interactive TTFT: ${[
      w('before', b.interactive.before),
      w('during', b.interactive.during),
      w('after', b.interactive.after),
    ].join('; ')}`,
  );
  if (b.output) {
    const o = b.output;
    out.push(
      o.ok
        ? `output: every custom_id exactly once (${o.exactlyOnce}: ${o.outputLines} output lines, ${o.errorLines} error lines)`
        : `output: NOT every custom_id exactly once: ${o.missing} missing, ${o.duplicated} duplicated, ${o.unexpected} unexpected (${o.outputLines} output, ${o.errorLines} error lines; e.g. ${[...o.examples.missing, ...o.examples.duplicated, ...o.examples.unexpected].slice(0, 3).join(', ')})`,
    );
  } else out.push('output: not checked (the batch did not complete)');
  for (const e of b.errors.slice(0, 3)) out.push(`batch error: ${e}`);
  return out;
}

/** Plain-text checks against the target: protected tenants within it, who took the drops. */
export function checks(summary: RunSummary, classes?: Record<string, number>): string[] {
  const out: string[] = [];
  const target = summary.targetP99TtftS;
  for (const t of summary.tenants) {
    const prot = isProtected(t.sloClass, classes);
    const p99 = fmtMs(t.ttftP99Ms);
    if (target !== undefined && prot) {
      const ok = t.ttftP99Ms <= target * 1_000;
      out.push(
        `${t.name} (${t.sloClass}, protected): p99 TTFT ${p99} ${ok ? 'within' : 'ABOVE'} target ${target * 1_000} ms; dropped ${fmt(t.dropPct, 2)}%`,
      );
    } else {
      out.push(
        `${t.name} (${t.sloClass}${prot ? '' : ', sheddable'}): p99 TTFT ${p99}; dropped ${fmt(t.dropPct, 2)}%`,
      );
    }
  }
  if (summary.capacityPct !== undefined) {
    out.push(
      `throughput ${fmt(summary.tokensPerS, 0)} tokens/s = ${fmt(summary.capacityPct, 1)}% of the pods' capacity (${fmt(summary.capacityTokensPerS ?? 0, 0)} tokens/s)`,
    );
  }
  return out;
}

/** The console summary of one run. */
export function summaryText(summary: RunSummary, classes?: Record<string, number>): string {
  const lines = [
    `${summary.label}: ${summary.scenario}`,
    `${'tenant'.padEnd(12)}${'class'.padEnd(10)}${'offered'.padStart(8)}${'ok'.padStart(8)}${'dropped'.padStart(9)}${'drop%'.padStart(7)}${'errors'.padStart(7)}${'p50 TTFT'.padStart(10)}${'p99 TTFT'.padStart(10)}${'p99 E2E'.padStart(10)}${'tok/s'.padStart(8)}`,
  ];
  for (const t of [...summary.tenants, summary.total]) {
    lines.push(
      `${t.name.slice(0, 11).padEnd(12)}${t.sloClass.slice(0, 9).padEnd(10)}${String(t.offered).padStart(8)}${String(t.completed).padStart(8)}${String(t.dropped).padStart(9)}${fmt(t.dropPct, 1).padStart(7)}${String(t.errors + t.aborted + t.overflow).padStart(7)}${fmtMs(t.ttftP50Ms).padStart(10)}${fmtMs(t.ttftP99Ms).padStart(10)}${fmtMs(t.e2eP99Ms).padStart(10)}${fmt(t.tokensPerS, 0).padStart(8)}`,
    );
  }
  lines.push(poolLine(summary));
  lines.push(serviceLine(summary));
  for (const u of summary.usage ?? []) {
    lines.push(
      `  metered ${u.tenant} (${u.model}): ${u.requests} requests, ${u.input_tokens} input / ${u.output_tokens} output / ${u.cached_tokens} cached tokens (GET /admin/usage)`,
    );
  }
  for (const c of checks(summary, classes)) lines.push(`  - ${c}`);
  if (summary.batch) for (const b of batchText(summary.batch)) lines.push(`  - ${b}`);
  return lines.join('\n');
}

const STYLE = `body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#111827;max-width:1560px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px}table{border-collapse:collapse;font-size:12px;margin:8px 0}
th,td{border:1px solid #d1d5db;padding:3px 7px;text-align:right}th{background:#f3f4f6}td:first-child,th:first-child{text-align:left}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(720px,1fr));gap:12px}.cols{display:grid;grid-template-columns:1fr 1fr;gap:16px}
figure{margin:0;border:1px solid #e5e7eb}figcaption{font-size:11px;color:#6b7280;padding:2px 6px}
ul{font-size:13px}pre{font-size:11px;background:#f9fafb;padding:8px;overflow:auto}.muted{color:#6b7280;font-size:12px}`;

function figure(chart: Chart): string {
  return `<figure>${chart.svg}<figcaption>${esc(chart.title)} — <a href="${esc(chart.file)}">${esc(chart.file)}</a></figcaption></figure>`;
}

function page(title: string, body: string): string {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${esc(title)}</title><style>${STYLE}</style></head><body>${body}<p class="muted">Generated by fairgate-load at ${new Date().toISOString()}. Charts: Apache ECharts server-side SVG.</p></body></html>`;
}

function writeCharts(dir: string, charts: Chart[]): void {
  for (const c of charts) writeFileSync(join(dir, c.file), c.svg);
}

export interface WrittenReport {
  dir: string;
  html: string;
  json: string;
  charts: string[];
  summaries: RunSummary[];
}

/** The gateway's metered tokens per tenant and model (GET /admin/usage), when it answered. */
function usageTable(summary: RunSummary): string {
  if (!summary.usage || summary.usage.length === 0) return '';
  const rows = summary.usage
    .map(
      (u) =>
        `<tr><td>${esc(u.tenant)}</td><td>${esc(u.model)}</td><td>${u.requests}</td><td>${u.input_tokens}</td><td>${u.output_tokens}</td><td>${u.cached_tokens}</td></tr>`,
    )
    .join('');
  return `<h3>Metered usage per tenant</h3><p class="muted">GET /admin/usage after the run: what the pods reported at release, in the hours of the run</p><table><tr><th>tenant</th><th>model</th><th>requests</th><th>input tokens</th><th>output tokens</th><th>cached tokens</th></tr>${rows}</table>`;
}

function runSection(
  result: RunResult,
  summary: RunSummary,
  charts: Chart[],
  classes?: Record<string, number>,
): string {
  return `<h2>${esc(result.label)}</h2>
<p class="muted">targets ${esc(result.targets.join(', '))}; seed ${result.seed}; ${result.durationS} s${result.stoppedEarly ? ' (stopped early)' : ''}</p>
${tenantTable(summary)}
<p>${esc(poolLine(summary))}</p>
<p>${esc(serviceLine(summary))}</p>
<ul>${checks(summary, classes)
    .map((c) => `<li>${esc(c)}</li>`)
    .join('')}</ul>
${usageTable(summary)}
${
  summary.batch
    ? `<h3>Batch</h3><ul>${batchText(summary.batch)
        .map((c) => `<li>${esc(c)}</li>`)
        .join('')}</ul>`
    : ''
}
<div class="grid">${charts.map(figure).join('')}</div>`;
}

/** One run, or several runs of one scenario side by side (--baseline, compare:). */
export function writeRunReport(
  dir: string,
  results: RunResult[],
  options: { title: string; scenarioYaml?: string; classes?: Record<string, number> },
): WrittenReport {
  mkdirSync(dir, { recursive: true });
  const summaries = results.map((r) => summarize(r));
  const perRun = results.map((r) => runCharts(r, results.length > 1 ? `${slug(r.label)}-` : ''));
  const compare = results.length > 1 ? comparisonCharts(results, summaries) : [];
  const all = [...perRun.flat(), ...compare];
  writeCharts(dir, all);
  let body = `<h1>${esc(options.title)}</h1>`;
  if (results.length > 1) {
    body += `<h2>Side by side</h2><div class="cols">${summaries
      .map(
        (s) =>
          `<div><h3>${esc(s.label)}</h3>${tenantTable(s)}<p>${esc(poolLine(s))}</p><p>${esc(serviceLine(s))}</p></div>`,
      )
      .join('')}</div><div class="grid">${compare.map(figure).join('')}</div>`;
    body += `<div class="cols">${results
      .map(
        (r, i) =>
          `<div>${runSection(
            r,
            summaries[i]!,
            perRun[i]!.map((c) => ({ ...c })),
            options.classes,
          )}</div>`,
      )
      .join('')}</div>`;
  } else if (results[0]) {
    body += runSection(results[0], summaries[0]!, perRun[0]!, options.classes);
  }
  if (options.scenarioYaml) body += `<h2>Scenario</h2><pre>${esc(options.scenarioYaml)}</pre>`;
  const meta = results.map((r) => ({ label: r.label, meta: r.meta }));
  body += `<h2>Configuration</h2><pre>${esc(JSON.stringify(meta, null, 2))}</pre>`;
  const html = join(dir, 'report.html');
  writeFileSync(html, page(options.title, body));
  const json = join(dir, 'results.json');
  writeFileSync(
    json,
    JSON.stringify({ kind: results.length > 1 ? 'compare' : 'run', summaries, results }, null, 1),
  );
  return { dir, html, json, charts: all.map((c) => join(dir, c.file)), summaries };
}

export interface SweepRun {
  point: SweepPoint;
  result: RunResult;
}

export function sweepText(analysis: SweepAnalysis): string {
  const lines = [
    `${'cap'.padStart(5)} ${'ctl'.padEnd(4)}${'p50 TTFT'.padStart(10)}${'p99 TTFT'.padStart(10)}${'p99 E2E'.padStart(10)}${'tok/s'.padStart(8)}${'drop%'.padStart(7)}${'end cap'.padStart(9)}`,
  ];
  analysis.caps.forEach((cap, i) => {
    for (const p of [analysis.off[i], analysis.on[i]]) {
      if (!p) continue;
      const t = p.summary.total;
      lines.push(
        `${String(cap).padStart(5)} ${p.controller.padEnd(4)}${fmtMs(t.ttftP50Ms).padStart(10)}${fmtMs(t.ttftP99Ms).padStart(10)}${fmtMs(t.e2eP99Ms).padStart(10)}${fmt(p.summary.tokensPerS, 0).padStart(8)}${fmt(t.dropPct, 1).padStart(7)}${String(p.endCap).padStart(9)}`,
      );
    }
  });
  if (analysis.best) {
    lines.push(
      `best static cap ${analysis.best.cap}: p99 TTFT ${fmtMs(analysis.best.p99Ms)}, ${fmt(analysis.best.tokensPerS, 0)} tokens/s`,
    );
  }
  if (analysis.uCurve) {
    lines.push(
      `U-curve: lowest cap p99 = ${fmt(analysis.uCurve.lowRatio, 2)}x best, highest cap p99 = ${fmt(analysis.uCurve.highRatio, 2)}x best -> ${analysis.uCurve.isU ? 'U-shaped' : 'NOT U-shaped'}`,
    );
  }
  for (const v of analysis.verdicts) {
    lines.push(
      `controller on from ${v.cap}: p99 ${fmtMs(v.p99Ms)} = ${fmt(v.p99Ratio, 2)}x best static (${v.withinP99 ? 'within' : 'OUTSIDE'} ±20%), throughput ${fmt(v.throughputRatio * 100, 1)}% of best static (${v.noLessThroughput ? 'no less' : 'LESS'})`,
    );
  }
  return lines.join('\n');
}

export function writeSweepReport(
  dir: string,
  runs: SweepRun[],
  options: { title: string; targetS?: number; scenarioYaml?: string; throughputSlack?: number },
): WrittenReport & { analysis: SweepAnalysis } {
  mkdirSync(dir, { recursive: true });
  const analysis = analyzeSweep(
    runs.map((r) => r.point),
    { throughputSlack: options.throughputSlack ?? 0 },
  );
  const charts = sweepCharts(analysis, options.targetS);
  const perRun = runs.map((r) => ({
    run: r,
    charts: runCharts(r.result, `${slug(r.result.label)}-`),
  }));
  writeCharts(dir, charts);
  for (const p of perRun) writeCharts(dir, p.charts);
  let body = `<h1>${esc(options.title)}</h1><pre>${esc(sweepText(analysis))}</pre><div class="grid">${charts.map(figure).join('')}</div>`;
  body += '<h2>Runs</h2>';
  for (const p of perRun) {
    body += `<details><summary>${esc(p.run.result.label)}</summary>${runSection(p.run.result, p.run.point.summary, p.charts)}</details>`;
  }
  if (options.scenarioYaml) body += `<h2>Scenario</h2><pre>${esc(options.scenarioYaml)}</pre>`;
  const html = join(dir, 'report.html');
  writeFileSync(html, page(options.title, body));
  const json = join(dir, 'results.json');
  writeFileSync(
    json,
    JSON.stringify(
      {
        kind: 'sweep',
        analysis,
        points: runs.map((r) => r.point),
        results: runs.map((r) => r.result),
      },
      null,
      1,
    ),
  );
  return {
    dir,
    html,
    json,
    charts: [...charts, ...perRun.flatMap((p) => p.charts)].map((c) => join(dir, c.file)),
    summaries: runs.map((r) => r.point.summary),
    analysis,
  };
}

export function slug(text: string): string {
  return (
    text
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, '-')
      .replace(/^-|-$/g, '') || 'run'
  );
}
