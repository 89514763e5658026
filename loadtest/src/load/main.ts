import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { stopAll } from '@fairgate/testkit';
import { stringify } from 'yaml';
import { buildSchedule } from './arrivals.js';
import { batchLines } from './batch.js';
import { builtInPath } from './builtins.js';
import { createLiveView } from './live.js';
import { serviceLine, summaryText, sweepText, writeRunReport, writeSweepReport } from './report.js';
import { type RunResult, runScenario } from './runner.js';
import {
  builtInNames,
  DEV_ADMIN_TOKEN,
  loadScenario,
  resolveInstant,
  type Scenario,
  ScenarioError,
  withGateway,
} from './scenario.js';
import {
  createScaler,
  type Infra,
  modelCapacity,
  probeCapacity,
  SIM_MODEL,
  startGateways,
  startInfra,
  type Variant,
} from './stack.js';
import { redactConfig, runSweep } from './sweep.js';

export const USAGE = `fairgate-load <scenario | file.yaml> [options]

Runs a load scenario against fairgate gateways and writes a report (results.json,
report.html, one .svg per chart).

  --target URL[,URL...]  gateway replicas to send to (a running stack)
  --stack                start a stack for the run (redis-server if installed, else the
                         embedded scheduler; pods and replicas from the scenario) and stop it after
  --baseline             with --stack: run the scenario against a fifo configuration (one FIFO,
                         static budget, no controller) and fairgate's defaults, side by side
                         (a scenario with compare: runs once per entry instead, side by side)
  --seconds N            duration (for a sweep: seconds per run)
  --seed N               seed of the arrival schedule and lengths
  --out DIR              report directory (default reports/<scenario>-<time>)
  --admin-token T        token for /admin/state (default ${DEV_ADMIN_TOKEN}, the examples' dev token)
  --model NAME           model field of requests (default ${SIM_MODEL})
  --plain                plain periodic lines instead of the live table (automatic without a TTY)
  --list                 list the built-in scenarios
  -h, --help             this text

Built-ins: ${builtInNames().join(', ')} (examples/scenarios/<name>.yaml).`;

export interface CliOutcome {
  code: number;
  reportDir?: string;
  results?: RunResult[];
}

function timestamp(): string {
  const d = new Date();
  const p = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}${p(d.getMonth() + 1)}${p(d.getDate())}-${p(d.getHours())}${p(d.getMinutes())}${p(d.getSeconds())}`;
}

function positiveNumber(name: string, value: string | undefined, max: number): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0 || n > max)
    throw new UsageError(`--${name} must be a number in (0, ${max}]`);
  return n;
}

export class UsageError extends Error {}

function scenarioText(nameOrPath: string): string | undefined {
  try {
    return readFileSync(builtInPath(nameOrPath) ?? nameOrPath, 'utf8');
  } catch {
    return undefined;
  }
}

/**
 * The CLI. Returns the exit code (never calls process.exit): 0 done, 1 failure, 2 usage or
 * scenario error, 130 interrupted. SIGINT/SIGTERM stop the run, write what was measured and
 * stop the stack (testkit also kills every child at once on those signals).
 */
export async function runCli(
  argv: string[],
  log: (line: string) => void = console.log,
): Promise<CliOutcome> {
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(argv);
  } catch (error) {
    console.error(`${error instanceof Error ? error.message : String(error)}\n\n${USAGE}`);
    return { code: 2 };
  }
  const { values, positionals } = parsed;
  if (values.help) {
    log(USAGE);
    return { code: 0 };
  }
  if (values.list) {
    for (const name of builtInNames()) {
      const s = loadScenario(name);
      log(`${name.padEnd(16)} ${s.description?.split('\n')[0] ?? ''}`);
    }
    return { code: 0 };
  }
  const name = positionals[0];
  if (!name || positionals.length > 1) {
    console.error(`give one scenario name or file\n\n${USAGE}`);
    return { code: 2 };
  }
  let scenario: Scenario;
  try {
    scenario = checkedScenario(name, values);
  } catch (error) {
    if (error instanceof ScenarioError || error instanceof UsageError) {
      console.error(error.message);
      return { code: 2 };
    }
    throw error;
  }

  const abort = new AbortController();
  const onSignal = interruptHandler(abort, log);
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const run: CliRun = {
    log,
    signal: abort.signal,
    plain: values.plain === true,
    out: resolve(values.out ?? join('reports', `${scenario.name}-${timestamp()}`)),
    yamlText: scenarioText(name) ?? stringify(scenario),
  };
  let infra: Infra | undefined;
  try {
    if (scenario.kind === 'sweep') {
      infra = await startInfra(scenario.stack, log);
      return await sweepCli(scenario, infra, run);
    }
    let results: RunResult[];
    if (values.stack) {
      infra = await startInfra(scenario.stack, log);
      results = await stackRuns(scenario, infra, values.baseline === true, run);
    } else results = [await targetRun(scenario, values, run)];
    if (results.length === 0) return { code: 130 };
    return reportRuns(scenario, results, run);
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await infra?.stop().catch(() => {});
    await stopAll();
  }
}

type CliValues = ReturnType<typeof parse>['values'];

/** What every step of one CLI run shares. */
interface CliRun {
  log: (line: string) => void;
  /** Aborted by SIGINT or SIGTERM. */
  signal: AbortSignal;
  plain: boolean;
  /** The report directory. */
  out: string;
  /** The scenario as written (or as parsed, when its file cannot be read again). */
  yamlText: string;
}

/**
 * The scenario `name` with the command line's --seconds and --seed applied, after checking
 * that the options fit together; throws ScenarioError or UsageError.
 */
function checkedScenario(name: string, values: CliValues): Scenario {
  const scenario = loadScenario(name);
  const seconds = positiveNumber('seconds', values.seconds, 86_400);
  const seed = values.seed === undefined ? undefined : Number(values.seed);
  if (seed !== undefined && (!Number.isInteger(seed) || seed < 0 || seed >= 2 ** 32)) {
    throw new UsageError('--seed must be an integer in [0, 2^32)');
  }
  if (seed !== undefined) scenario.seed = seed;
  if (seconds !== undefined) {
    if (scenario.sweep) scenario.sweep.run_s = seconds;
    else scenario.duration_s = seconds;
  }
  if (scenario.sweep && scenario.sweep.measure_last_s > scenario.sweep.run_s) {
    scenario.sweep.measure_last_s = scenario.sweep.run_s / 2;
  }
  if (scenario.kind === 'sweep' && !values.stack)
    throw new UsageError('a sweep starts its own stacks: add --stack');
  if (values.baseline && scenario.stack.autoscale)
    throw new UsageError(
      '--baseline does not apply to an autoscale stack (its pods follow the run)',
    );
  if (values.baseline && !values.stack)
    throw new UsageError('--baseline needs --stack (it configures the gateways)');
  if (scenario.compare && !values.stack)
    throw new UsageError(
      `${scenario.name} compares gateway configurations (compare:): add --stack`,
    );
  if (scenario.compare && values.baseline)
    throw new UsageError(
      `${scenario.name} has its own comparison (compare:): --baseline does not apply`,
    );
  if (!values.stack && !values.target)
    throw new UsageError('give --target URL[,URL...] or --stack');
  if (values.stack && values.target)
    throw new UsageError('--target and --stack exclude each other');
  return scenario;
}

/** The first signal aborts the run; another one more than 2 s later exits at once. */
function interruptHandler(
  abort: AbortController,
  log: (line: string) => void,
): (signal: NodeJS.Signals) => void {
  let interruptedAt = 0;
  return (signal) => {
    if (!abort.signal.aborted) {
      interruptedAt = Date.now();
      log(`\n${signal}: stopping the run and the stack...`);
      abort.abort();
    } else if (Date.now() - interruptedAt > 2_000) {
      process.exit(130);
    }
  };
}

/** A sweep on `infra`, and its report. */
async function sweepCli(scenario: Scenario, infra: Infra, run: CliRun): Promise<CliOutcome> {
  const { log, signal } = run;
  const capacity = await maybeProbe(scenario, infra, log, signal);
  const runs = await runSweep(scenario, infra, {
    log,
    signal,
    plain: run.plain,
    ...(capacity !== undefined ? { capacityTokensPerS: capacity } : {}),
  });
  const target = scenario.gateway.controller?.target_p99_ttft_s;
  const report = writeSweepReport(run.out, runs, {
    title: `fairgate-load sweep: ${scenario.name}`,
    ...(typeof target === 'number' ? { targetS: target } : {}),
    scenarioYaml: run.yamlText,
  });
  log(`\n${sweepText(report.analysis)}`);
  log(`\nreport:  ${report.html}\nresults: ${report.json}`);
  return {
    code: signal.aborted ? 130 : 0,
    reportDir: run.out,
    results: runs.map((r) => r.result),
  };
}

/**
 * The scenario against gateways started on `infra`: fairgate, after fifo with --baseline;
 * with compare:, once per entry (its gateway sections merged over the scenario's).
 */
async function stackRuns(
  scenario: Scenario,
  infra: Infra,
  baseline: boolean,
  run: CliRun,
): Promise<RunResult[]> {
  const { log, signal } = run;
  if (scenario.batch && infra.embedded) {
    log('batch:    the Batch API needs redis: (no redis-server here); the batch will not run');
  }
  const capacity = await maybeProbe(scenario, infra, log, signal);
  const fairgate: Variant = { kind: 'fairgate' };
  const variants: Array<{ label: string; variant: Variant; scenario: Scenario }> = scenario.compare
    ? scenario.compare.map((c) => ({
        label: c.label,
        variant: fairgate,
        scenario: withGateway(scenario, c.gateway),
      }))
    : baseline
      ? [
          { label: 'fifo', variant: { kind: 'fifo' }, scenario },
          { label: 'fairgate', variant: fairgate, scenario },
        ]
      : [{ label: 'fairgate', variant: fairgate, scenario }];
  const results: RunResult[] = [];
  for (const v of variants) {
    if (signal.aborted) break;
    const gateways = await startGateways(
      v.scenario,
      infra,
      v.variant,
      log,
      `${scenario.name}-${v.label}`,
    );
    // stack.autoscale: the local scaler follows desired_pods while the run lasts.
    const scaler = createScaler(infra, gateways.urls[0] as string, log);
    scaler?.start();
    try {
      results.push(
        await runOne(
          v.scenario,
          gateways.urls,
          v.label,
          DEV_ADMIN_TOKEN,
          SIM_MODEL,
          signal,
          run.plain,
          log,
          {
            ...(capacity !== undefined ? { capacityTokensPerS: capacity } : {}),
            meta: {
              stack: {
                ...scenario.stack,
                embedded: infra.embedded,
                replicas: gateways.urls.length,
              },
              gatewayConfig: redactConfig(gateways.config),
            },
          },
        ),
      );
      if (scaler) (results.at(-1) as RunResult).scaler = scaler.timeline;
    } finally {
      await scaler?.stop();
      await gateways.stop();
    }
  }
  return results;
}

/** The scenario against the running gateways of --target. */
function targetRun(scenario: Scenario, values: CliValues, run: CliRun): Promise<RunResult> {
  const targets = (values.target ?? '')
    .split(',')
    .map((t) => t.trim().replace(/\/+$/, ''))
    .filter(Boolean);
  return runOne(
    scenario,
    targets,
    'target',
    values['admin-token'] ?? DEV_ADMIN_TOKEN,
    values.model ?? SIM_MODEL,
    run.signal,
    run.plain,
    run.log,
    { meta: { targets } },
  );
}

/** Writes the runs' report and logs each run's summary and where the report is. */
function reportRuns(scenario: Scenario, results: RunResult[], run: CliRun): CliOutcome {
  const { log, out } = run;
  const classes = scenario.gateway.slo_classes;
  const report = writeRunReport(out, results, {
    title: `fairgate-load: ${scenario.name}${results.length > 1 ? ` (${results.map((r) => r.label).join(' vs ')})` : ''}`,
    scenarioYaml: run.yamlText,
    ...(classes ? { classes } : {}),
  });
  log('');
  for (const s of report.summaries) log(`${summaryText(s, classes)}\n`);
  if (results.length > 1) for (const s of report.summaries) log(`${s.label}: ${serviceLine(s)}`);
  log(
    `report:  ${report.html}\nresults: ${report.json}\ncharts:  ${report.charts.length} .svg files in ${out}`,
  );
  return { code: run.signal.aborted ? 130 : 0, reportDir: out, results };
}

/**
 * The pods' capacity for the report: the sim model's throughput with every pod full, at the
 * schedule's mean lengths; with stack.capacity_probe_s > 0 also measured directly against
 * the pods (logged as a cross-check).
 */
async function maybeProbe(
  scenario: Scenario,
  infra: Infra,
  log: (line: string) => void,
  signal: AbortSignal,
): Promise<number | undefined> {
  // The work's mean lengths: the live requests' and the batch's lines together.
  const schedule: Array<{ promptTokens: number; outputTokens: number }> = [
    ...buildSchedule(scenario, scenario.sweep?.run_s ?? scenario.duration_s),
    ...batchLines(scenario),
  ];
  const meanOf = (pick: (a: (typeof schedule)[number]) => number) =>
    schedule.reduce((sum, a) => sum + pick(a), 0) / Math.max(1, schedule.length);
  const perPod = Math.min(scenario.stack.pod_cap, scenario.stack.sim.max_num_seqs);
  const modeled = modelCapacity(
    scenario.stack,
    meanOf((a) => a.promptTokens),
    meanOf((a) => a.outputTokens),
  );
  log(
    `capacity: ${modeled.toFixed(0)} output tokens/s (sim model, ${scenario.stack.pods} pods full at ${perPod} requests, the schedule's mean lengths${scenario.batch ? " and the batch lines'" : ''})`,
  );
  const seconds = scenario.stack.capacity_probe_s;
  if (seconds > 0 && !signal.aborted) {
    const measured = await probeCapacity(scenario, infra, seconds);
    log(
      `          ${measured.toFixed(0)} output tokens/s measured directly against the pods (${seconds} s probe)`,
    );
  }
  return modeled;
}

async function runOne(
  scenario: Scenario,
  targets: string[],
  label: string,
  adminToken: string,
  model: string,
  signal: AbortSignal,
  plain: boolean,
  log: (line: string) => void,
  extra: { capacityTokensPerS?: number; meta?: Record<string, unknown> },
): Promise<RunResult> {
  log(
    `\nrunning ${scenario.name} (${label}) for ${scenario.duration_s} s, seed ${scenario.seed}, against ${targets.join(', ')}`,
  );
  const batch = scenario.batch;
  if (batch) {
    log(
      `batch:   ${batch.lines} lines of ${batch.tenant} at ${resolveInstant(batch.at_s, scenario.duration_s).toFixed(1)} s; the run waits for it up to ${scenario.duration_s + batch.drain_s} s`,
    );
  }
  const view = createLiveView(`${scenario.name} ${label}`, { plain });
  try {
    return await runScenario({
      scenario,
      targets,
      adminToken,
      model,
      label,
      signal,
      onTick: (p) => view.onTick(p),
      ...extra,
    });
  } finally {
    view.finish();
  }
}

function parse(argv: string[]) {
  return parseArgs({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: {
      target: { type: 'string' },
      stack: { type: 'boolean' },
      baseline: { type: 'boolean' },
      seconds: { type: 'string' },
      seed: { type: 'string' },
      out: { type: 'string' },
      'admin-token': { type: 'string' },
      model: { type: 'string' },
      plain: { type: 'boolean' },
      list: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
}
