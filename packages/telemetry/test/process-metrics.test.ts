import { setTimeout as sleep } from 'node:timers/promises';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { createEdgeMetrics, metricsText } from '../src/metrics.js';
import { type ProcessMetrics, registerProcessMetrics } from '../src/process-metrics.js';

const FAMILIES = [
  ['process_cpu_user_seconds_total', 'counter'],
  ['process_cpu_system_seconds_total', 'counter'],
  ['process_cpu_seconds_total', 'counter'],
  ['process_resident_memory_bytes', 'gauge'],
  ['process_start_time_seconds', 'gauge'],
  ['nodejs_heap_size_total_bytes', 'gauge'],
  ['nodejs_heap_size_used_bytes', 'gauge'],
  ['nodejs_external_memory_bytes', 'gauge'],
  ['nodejs_eventloop_lag_p50_seconds', 'gauge'],
  ['nodejs_eventloop_lag_p99_seconds', 'gauge'],
  ['nodejs_eventloop_lag_max_seconds', 'gauge'],
  ['nodejs_gc_duration_seconds', 'histogram'],
] as const;

let started: ProcessMetrics[] = [];
afterEach(() => {
  for (const metrics of started) metrics.stop();
  started = [];
});

function processRegistry(): { registry: Registry; metrics: ProcessMetrics } {
  const registry = new Registry();
  registry.setDefaultLabels({ replica: 'r1' });
  const metrics = registerProcessMetrics(registry);
  started.push(metrics);
  return { registry, metrics };
}

/** One scrape: each series' value by `name{labels}` (labels as exported). */
async function scrape(registry: Registry): Promise<Map<string, number>> {
  const values = new Map<string, number>();
  for (const line of (await registry.metrics()).split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    values.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return values;
}

function value(values: Map<string, number>, series: string): number {
  const found = values.get(series);
  if (found === undefined) throw new Error(`no series ${series} in the scrape`);
  return found;
}

/** Keeps the thread busy (the event loop blocked) for `ms` of wall time. */
function spin(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // busy
  }
}

/** Keeps the thread busy until the process spent `ms` more of CPU (however loaded the machine). */
function burnCpu(ms: number): void {
  const start = process.cpuUsage();
  while (true) {
    const spent = process.cpuUsage(start);
    if ((spent.user + spent.system) / 1_000 >= ms) return;
  }
}

describe('process metrics', () => {
  it('exports each family with its type and the registry default labels', async () => {
    const { registry } = processRegistry();
    const text = await registry.metrics();
    for (const [name, type] of FAMILIES) expect(text).toContain(`# TYPE ${name} ${type}\n`);
    const values = await scrape(registry);
    expect(value(values, 'process_resident_memory_bytes{replica="r1"}')).toBeGreaterThan(1e6);
    const used = value(values, 'nodejs_heap_size_used_bytes{replica="r1"}');
    expect(used).toBeGreaterThan(0);
    expect(used).toBeLessThanOrEqual(value(values, 'nodejs_heap_size_total_bytes{replica="r1"}'));
    const start = value(values, 'process_start_time_seconds{replica="r1"}');
    expect(Math.abs(start - (Date.now() / 1000 - process.uptime()))).toBeLessThanOrEqual(1);
  });

  it('counts the CPU the process spends between scrapes, user + system = total', async () => {
    const { registry } = processRegistry();
    const before = await scrape(registry);
    burnCpu(80);
    const after = await scrape(registry);
    const grew = (name: string) =>
      value(after, `${name}{replica="r1"}`) - value(before, `${name}{replica="r1"}`);
    expect(grew('process_cpu_seconds_total')).toBeGreaterThanOrEqual(0.079);
    expect(grew('process_cpu_user_seconds_total')).toBeGreaterThan(0);
    expect(
      grew('process_cpu_user_seconds_total') + grew('process_cpu_system_seconds_total'),
    ).toBeCloseTo(grew('process_cpu_seconds_total'), 6);
  });

  it('reads the event-loop delay since the last scrape: a blocked loop shows, then is forgotten', async () => {
    const { registry } = processRegistry();
    await sleep(50);
    spin(300);
    await sleep(30);
    const blocked = await scrape(registry);
    expect(value(blocked, 'nodejs_eventloop_lag_max_seconds{replica="r1"}')).toBeGreaterThan(0.29);
    expect(value(blocked, 'nodejs_eventloop_lag_p50_seconds{replica="r1"}')).toBeLessThan(0.29);
    await sleep(100);
    const quiet = await scrape(registry);
    // The 10 ms sampler's intervals: ~0.010 s when nothing holds the loop.
    const max = value(quiet, 'nodejs_eventloop_lag_max_seconds{replica="r1"}');
    expect(max).toBeGreaterThan(0.005);
    expect(max).toBeLessThan(0.25);
    expect(value(quiet, 'nodejs_eventloop_lag_p99_seconds{replica="r1"}')).toBeLessThanOrEqual(max);
  });

  it('times garbage collections by kind', async () => {
    const { registry } = processRegistry();
    // Enough short-lived garbage for several young-generation collections.
    let junk: Array<{ i: number }> = [];
    for (let i = 0; i < 2_000_000; i++) {
      junk.push({ i });
      if (junk.length === 1_000) junk = [];
    }
    await sleep(50); // the observer is called after the collection, in a later turn
    const values = await scrape(registry);
    expect(
      value(values, 'nodejs_gc_duration_seconds_count{replica="r1",kind="minor"}'),
    ).toBeGreaterThan(0);
  });

  it('samples nothing once stopped', async () => {
    const { registry, metrics } = processRegistry();
    metrics.stop();
    await sleep(30);
    spin(60);
    const values = await scrape(registry);
    expect(value(values, 'nodejs_eventloop_lag_max_seconds{replica="r1"}')).toBe(0);
  });

  it('shows once in a replica scrape beside the pools (metricsText)', async () => {
    const edge = createEdgeMetrics({ replica: 'r1' });
    started.push(registerProcessMetrics(edge.registry));
    const pool = new Registry();
    pool.setDefaultLabels({ replica: 'r1', pool: 'main' });
    const text = await metricsText([edge.registry, pool]);
    expect(text.match(/^process_resident_memory_bytes\{/gm)).toHaveLength(1);
    expect(text.match(/^# TYPE nodejs_gc_duration_seconds histogram$/gm)).toHaveLength(1);
  });
});
