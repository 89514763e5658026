import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import {
  type AppHandle,
  findExecutable,
  freePort,
  type ManagedProcess,
  repoRoot,
  sha256Hex,
  spawnManaged,
  TEST_KEYS,
  uniquePrompt,
  waitUntil,
} from '@fairgate/testkit';
import { parse, stringify } from 'yaml';
import { type GenerateResult, generate, type Pool, sleep, startPool } from './pool.js';

/**
 * The operations stack of test/ops/prometheus.test.ts and loadtest/snapshot/dashboard.ts:
 * a pool (Redis, two sims, two gateway replicas with the controller and the tuner on), a real
 * Prometheus scraping it with infra/prometheus.yml's jobs and infra/fairgate.rules.yml's
 * rules, a load that makes drops happen, and the dashboard's queries.
 */

export const INFRA = join(repoRoot, 'infra');
export const PROMETHEUS_YML = join(INFRA, 'prometheus.yml');
export const RULES_YML = join(INFRA, 'fairgate.rules.yml');
/** promtool unit tests of the rules on synthetic series (`promtool test rules`). */
export const RULES_TEST_YML = join(INFRA, 'fairgate.rules.test.yml');
export const DASHBOARD_JSON = join(INFRA, 'grafana', 'dashboards', 'fairgate.json');

export const EXTRA_KEY = TEST_KEYS.extra;

const run = promisify(execFile);

export function findPrometheus(): { prometheus: string; promtool: string } | undefined {
  const prometheus = findExecutable('prometheus');
  const promtool = findExecutable('promtool');
  return prometheus && promtool ? { prometheus, promtool } : undefined;
}

export const PROMETHEUS_MISSING =
  'prometheus/promtool not found on the PATH: apt-get install -y prometheus (.ci/run installs it)';

/** `promtool <args>`; resolves with its output, rejects with it on a non-zero exit. */
export async function promtool(bin: string, args: string[]): Promise<string> {
  try {
    const { stdout, stderr } = await run(bin, args, { timeout: 30_000 });
    return `${stdout}${stderr}`;
  } catch (error) {
    const e = error as { stdout?: string; stderr?: string; message: string };
    throw new Error(`promtool ${args.join(' ')} failed: ${e.stdout ?? ''}${e.stderr ?? e.message}`);
  }
}

// ---------------------------------------------------------------------------------------
// The dashboard

export interface DashboardTarget {
  panel: string;
  refId: string;
  expr: string;
  legendFormat: string;
}

export interface DashboardPanel {
  id: number;
  title: string;
  description: string;
  unit: string;
  log: boolean;
  targets: DashboardTarget[];
  /** refIds drawn on the right axis, and their unit. */
  rightAxis: Map<string, string>;
  /** refIds drawn dashed. */
  dashed: Set<string>;
}

export interface DashboardVariable {
  name: string;
  /** `label_values(metric, label)` */
  query: string;
}

interface RawPanel {
  id: number;
  type: string;
  title: string;
  description?: string;
  fieldConfig?: {
    defaults?: { unit?: string; custom?: { scaleDistribution?: { type?: string } } };
    overrides?: Array<{
      matcher: { id: string; options: string };
      properties: Array<{ id: string; value: unknown }>;
    }>;
  };
  targets?: Array<{ refId: string; expr: string; legendFormat?: string }>;
  panels?: RawPanel[];
}

export function readDashboard(path = DASHBOARD_JSON): {
  panels: DashboardPanel[];
  variables: DashboardVariable[];
  raw: Record<string, unknown>;
} {
  const raw = JSON.parse(readFileSync(path, 'utf8')) as {
    panels: RawPanel[];
    templating?: { list?: Array<{ name: string; query: string | { query: string } }> };
  };
  const flat = raw.panels.flatMap((p) => [p, ...(p.panels ?? [])]);
  const panels = flat
    .filter((p) => p.type !== 'row')
    .map((p): DashboardPanel => {
      const rightAxis = new Map<string, string>();
      const dashed = new Set<string>();
      for (const o of p.fieldConfig?.overrides ?? []) {
        if (o.matcher.id !== 'byFrameRefID') continue;
        const unit = o.properties.find((x) => x.id === 'unit')?.value;
        for (const prop of o.properties) {
          if (prop.id === 'custom.axisPlacement' && prop.value === 'right') {
            rightAxis.set(o.matcher.options, typeof unit === 'string' ? unit : 'short');
          }
          if (prop.id === 'custom.lineStyle') dashed.add(o.matcher.options);
        }
      }
      return {
        id: p.id,
        title: p.title,
        description: p.description ?? '',
        unit: p.fieldConfig?.defaults?.unit ?? 'short',
        log: p.fieldConfig?.defaults?.custom?.scaleDistribution?.type === 'log',
        targets: (p.targets ?? []).map((t) => ({
          panel: p.title,
          refId: t.refId,
          expr: t.expr,
          legendFormat: t.legendFormat ?? '',
        })),
        rightAxis,
        dashed,
      };
    });
  const variables = (raw.templating?.list ?? []).map((v) => ({
    name: v.name,
    query: typeof v.query === 'string' ? v.query : v.query.query,
  }));
  return { panels, variables, raw };
}

/**
 * Grafana's variables as the dashboard is first opened (every variable at All = `.*`) and its
 * built-in intervals. Anything else left with a `$` is an error: Prometheus would not know it.
 */
export function substituteVariables(
  expr: string,
  values: Record<string, string> = {},
  rateInterval = '15s',
): string {
  const all: Record<string, string> = {
    __rate_interval: rateInterval,
    __interval: rateInterval,
    __range: '5m',
    ...values,
  };
  const out = expr.replace(
    /\$\{([A-Za-z_][A-Za-z0-9_]*)(?::[a-z]+)?\}|\$([A-Za-z_][A-Za-z0-9_]*)/g,
    (whole, braced: string | undefined, bare: string | undefined) => {
      const name = braced ?? bare ?? '';
      const value = all[name];
      if (value === undefined) throw new Error(`unknown dashboard variable ${whole} in: ${expr}`);
      return value;
    },
  );
  return out;
}

// ---------------------------------------------------------------------------------------
// Prometheus

export interface PromSample {
  metric: Record<string, string>;
  value?: [number, string];
  values?: Array<[number, string]>;
}

export interface PromAlert {
  labels: Record<string, string>;
  state: 'pending' | 'firing';
  value: string;
}

export interface PromRule {
  name: string;
  query: string;
  health: string;
  lastError?: string;
  type: 'alerting' | 'recording';
  state?: string;
}

export interface PrometheusHandle {
  readonly url: string;
  readonly process: ManagedProcess;
  readonly dir: string;
  query(expr: string): Promise<PromSample[]>;
  queryRange(expr: string, startS: number, endS: number, stepS: number): Promise<PromSample[]>;
  labelValues(label: string, match: string): Promise<string[]>;
  alerts(): Promise<PromAlert[]>;
  rules(): Promise<PromRule[]>;
  targets(): Promise<Array<{ job: string; health: string; url: string }>>;
  /** Stops the process and removes its directory (config, rules, TSDB). */
  stop(): Promise<void>;
}

export interface PrometheusTestConfig {
  gateways: readonly string[];
  sims: readonly string[];
  /** scrape_interval and evaluation_interval. */
  intervalS?: number;
  /** Every rule's `for:` in the copy (the real durations are minutes). */
  ruleFor?: string;
}

/**
 * infra/prometheus.yml with its targets rewritten to this machine's processes (static
 * targets instead of compose's DNS), short intervals, and a copy of infra/fairgate.rules.yml
 * next to it whose `for:` durations are `ruleFor`. Fails if the real file lacks the jobs or
 * the rule file the compose stack relies on.
 */
export function writePrometheusConfig(dir: string, options: PrometheusTestConfig): string {
  const config = parse(readFileSync(PROMETHEUS_YML, 'utf8')) as {
    global?: Record<string, unknown>;
    rule_files?: string[];
    scrape_configs: Array<Record<string, unknown> & { job_name: string }>;
  };
  const interval = `${options.intervalS ?? 1}s`;
  config.global = { ...config.global, scrape_interval: interval, evaluation_interval: interval };
  const targets: Record<string, readonly string[]> = {
    'fairgate-gateway': options.gateways,
    'fairgate-sim': options.sims,
  };
  for (const [job, hostPorts] of Object.entries(targets)) {
    const scrape = config.scrape_configs.find((s) => s.job_name === job);
    if (!scrape) throw new Error(`${PROMETHEUS_YML} has no scrape job '${job}'`);
    delete scrape.dns_sd_configs;
    scrape.static_configs = [{ targets: hostPorts.map((url) => new URL(url).host) }];
    scrape.scrape_interval = interval;
  }
  const ruleFiles = config.rule_files ?? [];
  if (!ruleFiles.includes('fairgate.rules.yml')) {
    throw new Error(`${PROMETHEUS_YML} does not load fairgate.rules.yml`);
  }
  const rules = parse(readFileSync(RULES_YML, 'utf8')) as {
    groups: Array<{ rules: Array<Record<string, unknown>> }>;
  };
  for (const group of rules.groups) {
    for (const rule of group.rules) {
      if (rule.alert !== undefined) rule.for = options.ruleFor ?? '2s';
    }
  }
  writeFileSync(join(dir, 'fairgate.rules.yml'), stringify(rules));
  const path = join(dir, 'prometheus.yml');
  writeFileSync(path, stringify(config));
  return path;
}

async function promGet<T>(url: string): Promise<T> {
  const response = await fetch(url, { signal: AbortSignal.timeout(10_000) });
  const body = (await response.json()) as { status: string; data: T; error?: string };
  if (body.status !== 'success') throw new Error(`${url}: ${body.error ?? response.status}`);
  return body.data;
}

/** A private Prometheus on a free loopback port with the rewritten config; ready when /-/ready answers. */
export async function startPrometheus(
  binary: string,
  options: PrometheusTestConfig,
): Promise<PrometheusHandle> {
  const dir = mkdtempSync(join(tmpdir(), 'fairgate-prom-'));
  const configPath = writePrometheusConfig(dir, options);
  mkdirSync(join(dir, 'data'));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const child = spawnManaged({
    name: `prometheus:${port}`,
    command: binary,
    args: [
      `--config.file=${configPath}`,
      `--storage.tsdb.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--storage.tsdb.retention.time=1d',
      '--log.level=warn',
    ],
  });
  await waitUntil(
    `prometheus at ${url}`,
    async () => (await fetch(`${url}/-/ready`, { signal: AbortSignal.timeout(1_000) })).ok,
    { process: child, timeoutMs: 20_000, intervalMs: 100 },
  );
  const api = (path: string, params: Record<string, string | number> = {}) => {
    const query = new URLSearchParams(
      Object.entries(params).map(([k, v]) => [k, String(v)] as [string, string]),
    );
    return `${url}/api/v1/${path}${query.size > 0 ? `?${query}` : ''}`;
  };
  return {
    url,
    process: child,
    dir,
    async query(expr) {
      const data = await promGet<{ resultType: string; result: PromSample[] | [number, string] }>(
        api('query', { query: expr }),
      );
      if (data.resultType === 'scalar') {
        return [{ metric: {}, value: data.result as [number, string] }];
      }
      return data.result as PromSample[];
    },
    async queryRange(expr, startS, endS, stepS) {
      const data = await promGet<{ result: PromSample[] }>(
        api('query_range', { query: expr, start: startS, end: endS, step: stepS }),
      );
      return data.result;
    },
    async labelValues(label, match) {
      return promGet<string[]>(
        api(`label/${encodeURIComponent(label)}/values`, { 'match[]': match }),
      );
    },
    async alerts() {
      return (await promGet<{ alerts: PromAlert[] }>(api('alerts'))).alerts;
    },
    async rules() {
      const data = await promGet<{ groups: Array<{ rules: PromRule[] }> }>(api('rules'));
      return data.groups.flatMap((g) => g.rules);
    },
    async targets() {
      const data = await promGet<{
        activeTargets: Array<{ labels: Record<string, string>; health: string; scrapeUrl: string }>;
      }>(api('targets'));
      return data.activeTargets.map((t) => ({
        job: t.labels.job ?? '',
        health: t.health,
        url: t.scrapeUrl,
      }));
    },
    async stop() {
      await child.stop(5_000);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

// ---------------------------------------------------------------------------------------
// The pool and its load

/** Target the controller and the protected classes share (s); critical gets 5 ms, on purpose. */
export const OPS_TARGET_S = 2;
/** critical's own target (scheduler.slo_targets_ms): below any TTFT the sims can give. */
export const CRITICAL_TARGET_MS = 5;

/**
 * The pool: two sims (20 ms iterations, 16 output tokens: ~0.35 s per request), two replicas,
 * the controller (target 2 s, cap per worker 3 in [2, 6], 1 s ticks) and the tuner (2 s
 * periods). Tenants: `paying` (standard..critical, weight 2), `free` (batch, queue 5) and
 * `extra` (standard, a queue of 1: it floods a protected class into tenant_queue_full).
 */
export function startOpsPool(): Promise<Pool> {
  return startPool({
    replicas: 2,
    sims: [
      { 'alpha-ms': 20, 'beta-ms': 0.05, 'gamma-ms': 0.0005 },
      { 'alpha-ms': 20, 'beta-ms': 0.05, 'gamma-ms': 0.0005 },
    ],
    budget: 6,
    tenants: [
      {
        id: 'paying',
        api_key_sha256: [sha256Hex(TEST_KEYS.paying)],
        weight: 2,
        default_class: 'standard',
        max_class: 'critical',
        queue_max: 100,
      },
      {
        id: 'free',
        api_key_sha256: [sha256Hex(TEST_KEYS.free)],
        weight: 1,
        default_class: 'batch',
        queue_max: 5,
      },
      {
        id: 'extra',
        api_key_sha256: [sha256Hex(EXTRA_KEY)],
        weight: 1,
        default_class: 'standard',
        queue_max: 1,
      },
    ],
    scheduler: { queue_ttl_ms: 500, slo_targets_ms: { critical: CRITICAL_TARGET_MS } },
    // Margins for a busy 2-core machine: a slow Redis call or a late renewal here would be
    // a real FairgateRedisErrors or a leaderless moment, which this load must not provoke.
    redis: { command_timeout_ms: 1_000 },
    sections: {
      leader: { lease_ttl_ms: 3_000, renew_ms: 1_000 },
      controller: {
        target_p99_ttft_s: OPS_TARGET_S,
        tick_s: 1,
        window_s: 5,
        cap_per_worker: 3,
        cap_per_worker_min: 2,
        cap_per_worker_max: 6,
        min_samples: 5,
      },
      tuner: { period_s: 2, min_requests: 5 },
    },
  });
}

export interface OpsLoadOptions {
  /** Where each request goes (round robin over what it returns at send time). */
  gateways: () => readonly AppHandle[];
  seconds: number;
  /** Multiplies every rate. */
  scale?: number;
  /** Which flows run (default all). */
  flows?: readonly OpsFlow[];
}

export type OpsFlow = 'paying' | 'paying-critical' | 'extra' | 'free';

const PROMPT_TOKENS = 200;

const LOAD_MIX: Array<{ flow: OpsFlow; key: string; ratePerS: number; sloClass?: string }> = [
  { flow: 'paying', key: TEST_KEYS.paying, ratePerS: 5 },
  { flow: 'paying-critical', key: TEST_KEYS.paying, ratePerS: 2, sloClass: 'critical' },
  { flow: 'extra', key: EXTRA_KEY, ratePerS: 16 },
  { flow: 'free', key: TEST_KEYS.free, ratePerS: 16 },
];

/**
 * Open-loop streaming load, bounded in count and time: paying (standard 5/s, critical 2/s) well inside
 * the pool, `extra` and `free` 16/s each: together above the pool's ~35 requests/s at the
 * largest budget, so free (batch) and extra (standard, queue of 1) are dropped all along.
 */
export async function runOpsLoad(options: OpsLoadOptions): Promise<GenerateResult[]> {
  const scale = options.scale ?? 1;
  const durationMs = options.seconds * 1_000;
  const start = performance.now();
  let sent = 0;
  const mix = LOAD_MIX.filter((f) => !options.flows || options.flows.includes(f.flow));
  const flows = mix.map(async (flow) => {
    const rate = flow.ratePerS * scale;
    const count = Math.floor((rate * durationMs) / 1_000);
    const pending: Promise<GenerateResult>[] = [];
    for (let i = 0; i < count; i++) {
      const wait = start + (i * 1_000) / rate - performance.now();
      if (wait > 0) await sleep(wait);
      if (performance.now() - start > durationMs + 1_000) break;
      const live = options.gateways();
      const gateway = live[sent++ % live.length];
      if (!gateway) break;
      pending.push(
        generate(gateway.url, flow.key, {
          maxTokens: 16,
          stream: true,
          // Unique prompts (the sims' prefix cache would skip their prefill) of ~200
          // tokens, so the tuner sees prefill work to learn beta from.
          content: uniquePrompt(PROMPT_TOKENS, Math.random),
          ...(flow.sloClass ? { sloClass: flow.sloClass } : {}),
        }),
      );
    }
    return Promise.all(pending);
  });
  return (await Promise.all(flows)).flat();
}

/** Polls `probe` until it returns a value (not undefined), up to `timeoutMs`. */
export async function eventually<T>(
  probe: () => Promise<T | undefined>,
  timeoutMs: number,
  intervalMs = 500,
): Promise<T | undefined> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined || Date.now() >= deadline) return value;
    await sleep(intervalMs);
  }
}
