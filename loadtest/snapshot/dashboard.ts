/**
 * Pictures of the Grafana dashboard without Grafana: runs the stack of test/ops (Redis, two
 * sims, two gateway replicas, a real Prometheus with infra/prometheus.yml's jobs and
 * infra/fairgate.rules.yml), a load in three phases (paying alone; then free and extra
 * flood; then the leader replica is stopped and the other takes over), queries every panel
 * of infra/grafana/dashboards/fairgate.json over the run (/api/v1/query_range) and draws
 * each panel as an SVG chart (ECharts), converted to PNG by rsvg-convert
 * (`apt-get install -y librsvg2-bin`) into docs/img/dashboard/<panel>.png.
 *
 *   npm run build && npm run snapshot:dashboard -w @fairgate/loadtest [-- --seconds 90 --out DIR]
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { findExecutable, repoRoot } from '@fairgate/testkit';
import * as echarts from 'echarts';
import {
  type DashboardPanel,
  findPrometheus,
  PROMETHEUS_MISSING,
  type PromSample,
  readDashboard,
  runOpsLoad,
  startOpsPool,
  startPrometheus,
  substituteVariables,
} from '../../test/support/ops-stack.js';
import { sleep } from '../../test/support/pool.js';
import { PALETTE } from '../src/load/charts.js';

const { values: flags } = parseArgs({
  options: {
    seconds: { type: 'string', default: '90' },
    out: { type: 'string', default: join(repoRoot, 'docs', 'img', 'dashboard') },
    width: { type: 'string', default: '640' },
    height: { type: 'string', default: '300' },
  },
});
const totalS = Number(flags.seconds);
const width = Number(flags.width);
const height = Number(flags.height);
if (!(totalS >= 30)) throw new Error('--seconds must be at least 30');

const tools = findPrometheus();
if (!tools) throw new Error(PROMETHEUS_MISSING);
const rsvg = findExecutable('rsvg-convert');
if (!rsvg) throw new Error('rsvg-convert not found: apt-get install -y librsvg2-bin');

const log = (line: string) => console.log(`dashboard-snapshot: ${line}`);

function slug(title: string): string {
  return title
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-|-$/g, '');
}

function legendName(format: string, metric: Record<string, string>): string {
  const name = format.replace(/\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}/g, (_, l: string) => {
    return metric[l] ?? '';
  });
  return name.trim() || JSON.stringify(metric);
}

const UNIT_NAMES: Record<string, string> = {
  s: 'seconds',
  ms: 'ms',
  reqps: 'requests/s',
  percentunit: '1 = 100%',
};

/** The load report's palette, and more: a panel has up to MAX_SERIES series. */
const COLORS = [...PALETTE, '#ca8a04', '#db2777', '#65a30d', '#7c3aed', '#0f766e'];

/** Most series drawn in one picture: the largest by peak, the rest named in the subtitle. */
const MAX_SERIES = 12;

function compact(value: number): string {
  if (value === 0) return '0';
  const abs = Math.abs(value);
  if (abs >= 1_000 || abs < 0.001) return value.toExponential(0).replace('e+', 'e');
  return String(Number(value.toPrecision(3)));
}

/** Axis labels: seconds below one as ms (0.005 -> "5 ms"), fractions as percent. */
function axisLabel(unit: string): (value: number) => string {
  if (unit === 's') {
    return (v) => (v !== 0 && Math.abs(v) < 1 ? `${compact(v * 1_000)} ms` : `${compact(v)} s`);
  }
  if (unit === 'percentunit') return (v) => `${compact(v * 100)}%`;
  return compact;
}

interface Series {
  name: string;
  refId: string;
  points: Array<[number, number | null]>;
}

/** One panel as an SVG: its targets' series, right-axis and dashed refIds as the dashboard says. */
function renderPanel(panel: DashboardPanel, all: Series[], bars: boolean): string {
  const peak = (s: Series) => Math.max(0, ...s.points.map(([, v]) => v ?? 0));
  // A query that gave one series (a total, a target) is always drawn; the rest by peak.
  const perRef = (refId: string) => all.filter((s) => s.refId === refId).length;
  const kept = all.filter((s) => perRef(s.refId) === 1);
  const rest = all.filter((s) => perRef(s.refId) > 1).sort((a, b) => peak(b) - peak(a));
  const series = [...kept, ...rest.slice(0, Math.max(0, MAX_SERIES - kept.length))];
  const left = all.length - series.length;
  const chart = echarts.init(null, null, { renderer: 'svg', ssr: true, width, height });
  try {
    const hasRight = series.some((s) => panel.rightAxis.has(s.refId));
    const rightUnit = [...panel.rightAxis.values()][0] ?? 'short';
    const yAxis: Record<string, unknown>[] = [
      {
        type: panel.log ? 'log' : 'value',
        axisLabel: { formatter: axisLabel(panel.unit), fontSize: 10 },
        splitLine: { lineStyle: { color: '#e5e7eb' } },
        ...(panel.log ? { logBase: 10 } : { min: 0 }),
      },
    ];
    if (hasRight) {
      yAxis.push({
        type: 'value',
        min: 0,
        axisLabel: { formatter: axisLabel(rightUnit), fontSize: 10 },
        splitLine: { show: false },
      });
    }
    const leftName = UNIT_NAMES[panel.unit];
    const rightName = hasRight ? UNIT_NAMES[rightUnit] : undefined;
    const units = [leftName, rightName ? `right axis: ${rightName}` : undefined]
      .filter(Boolean)
      .join(', ');
    const subtitle = [
      'seconds since the run started',
      units,
      panel.log ? 'log scale' : '',
      left > 0 ? `the ${series.length} largest of ${all.length} series` : '',
    ]
      .filter(Boolean)
      .join(', ');
    chart.setOption({
      animation: false,
      backgroundColor: '#ffffff',
      color: COLORS,
      title: {
        text: panel.title,
        subtext: subtitle,
        left: 10,
        top: 4,
        textStyle: { fontSize: 14 },
        subtextStyle: { fontSize: 10 },
      },
      legend: {
        bottom: 2,
        left: 'center',
        type: 'plain',
        icon: 'roundRect',
        itemWidth: 14,
        itemHeight: 4,
        textStyle: { fontSize: 10 },
      },
      grid: { left: 64, right: hasRight ? 56 : 20, top: 52, bottom: 48 + legendRows(series) * 16 },
      xAxis: {
        type: 'value',
        min: 0,
        axisLabel: { formatter: (v: number) => `${v} s`, fontSize: 10 },
        splitLine: { show: false },
      },
      yAxis,
      series: series.map((s) => {
        const right = panel.rightAxis.has(s.refId);
        const asBars = bars && !right;
        return {
          name: s.name,
          type: asBars ? 'bar' : 'line',
          ...(asBars ? { stack: 'total', barMaxWidth: 6 } : {}),
          yAxisIndex: right ? 1 : 0,
          data: panel.log
            ? s.points.map(([t, v]) => [t, v !== null && v > 0 ? v : null])
            : s.points,
          showSymbol: false,
          connectNulls: false,
          lineStyle: { width: 1.5, type: panel.dashed.has(s.refId) ? 'dashed' : 'solid' },
        };
      }),
    });
    return chart.renderToSVGString();
  } finally {
    chart.dispose();
  }
}

function legendRows(series: Series[]): number {
  const chars = series.reduce((sum, s) => sum + s.name.length + 5, 0);
  return Math.max(0, Math.ceil((chars * 6) / (width - 40)) - 1);
}

async function main(): Promise<void> {
  const { panels } = readDashboard();
  log(`starting the stack (${panels.length} panels to draw after a ${totalS} s run)`);
  const pool = await startOpsPool();
  const prom = await startPrometheus(tools!.prometheus, {
    gateways: pool.gateways.map((g) => g.url),
    sims: pool.sims.map((s) => s.url),
    intervalS: 1,
  });
  try {
    const startS = Date.now() / 1_000;
    const stopped = new Set<string>();
    const live = () => pool.gateways.filter((g) => !stopped.has(g.url));
    const lightS = Math.round(totalS * 0.25);
    const floodS = totalS - lightS;
    log(`phase 1: paying alone for ${lightS} s`);
    await runOpsLoad({ gateways: live, seconds: lightS, flows: ['paying', 'paying-critical'] });
    log(`phase 2: free and extra flood for ${floodS} s; the leader replica stops at 60% of it`);
    const flood = runOpsLoad({ gateways: live, seconds: floodS });
    await sleep(floodS * 600);
    const leader = (await pool.state()).leader;
    const index = pool.gateways.findIndex((_, i) => `replica-${i + 1}` === leader);
    const victim = pool.gateways[index];
    if (victim) {
      stopped.add(victim.url);
      log(`stopping the leader ${leader} (SIGTERM: it hands the lease over)`);
      await victim.stop();
    }
    const results = await flood;
    await sleep(3_000);
    const endS = Date.now() / 1_000;
    log(`load done: ${results.length} requests; querying ${panels.length} panels`);

    rmSync(flags.out!, { recursive: true, force: true });
    mkdirSync(flags.out!, { recursive: true });
    const stepS = 2;
    let bytes = 0;
    for (const panel of panels) {
      const series: Series[] = [];
      for (const target of panel.targets) {
        const expr = substituteVariables(
          target.expr,
          { pool: '.*', tenant: '.*', replica: '.*' },
          '10s',
        );
        const result: PromSample[] = await prom.queryRange(expr, startS, endS, stepS);
        for (const sample of result) {
          series.push({
            name: legendName(target.legendFormat, sample.metric),
            refId: target.refId,
            points: (sample.values ?? []).map(([t, v]) => {
              const n = Number(v);
              return [Math.round(t - startS), Number.isFinite(n) ? n : null];
            }),
          });
        }
      }
      const bars = panel.title === 'Controller actions';
      const svg = renderPanel(panel, series, bars);
      const base = join(flags.out!, slug(panel.title));
      writeFileSync(`${base}.svg`, svg);
      execFileSync(rsvg!, ['-b', 'white', '-o', `${base}.png`, `${base}.svg`]);
      rmSync(`${base}.svg`);
      const size = statSync(`${base}.png`).size;
      bytes += size;
      log(`${slug(panel.title)}.png: ${series.length} series, ${(size / 1024).toFixed(0)} KiB`);
    }
    log(`wrote ${panels.length} PNGs (${(bytes / 1024).toFixed(0)} KiB) to ${flags.out}`);
  } finally {
    await prom.stop();
    await pool.stop();
  }
}

await main();
