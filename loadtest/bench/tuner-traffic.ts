/**
 * The capacity tuner on production-like traffic with real processes: the traffic shapes of
 * test/support/tuner-study/shapes.ts through two gateway replicas (one Redis) to two sims.
 *
 *   npm run bench:tuner-traffic -w @fairgate/loadtest -- [--shape below,peaks,overload]
 *     [--seed 1] [--periods 13] [--period-s 10]
 *
 * Open-loop Poisson arrivals at totalRates(shape), switched when the tuner's period increments
 * (GET /admin/capacity), sent alternately to the replicas (/v1/completions, 20..320 one-token
 * words with no shared cached prefix, max_tokens 16..128). Printed per period: the offered
 * rate, the answers, each pod's event and estimates; then per pod the errors of alpha, beta,
 * gamma and lambda* against the truth, the share of periods the filter took, and a verdict.
 */
import { maxRate } from '@fairgate/control';
import { createRng, deriveSeed, type Rng, uniformInt } from '@fairgate/runtime';
import {
  type AppHandle,
  sha256Hex,
  startGatewayProcess,
  startSim,
  TEST_KEYS,
  writeGatewayConfig,
} from '@fairgate/testkit';
import {
  TRAFFIC_INPUT,
  TRAFFIC_MAX_BATCH,
  TRAFFIC_OUTPUT,
  TRAFFIC_PERIOD_S,
  TRAFFIC_PERIODS,
  TRAFFIC_PODS,
  TRAFFIC_QUEUE,
  TRAFFIC_SHAPES,
  TRAFFIC_TARGETS,
  TRAFFIC_TRUTH,
  TRAFFIC_WORKLOAD,
  type TrafficShape,
  totalRates,
} from '../../test/support/tuner-study/shapes.js';
import { pct } from './harness/report.js';
import { flag, runBench, startBenchRedis } from './harness/stack.js';
import { type CapacityReport, nextPeriod } from './harness/tuner.js';

const SHAPES = (flag('shape') ?? TRAFFIC_SHAPES.join(',')).split(',') as TrafficShape[];
for (const s of SHAPES) if (!TRAFFIC_SHAPES.includes(s)) throw new Error(`unknown shape ${s}`);
const SEED = Number(flag('seed') ?? 1);
const PERIODS = Number(flag('periods') ?? TRAFFIC_PERIODS);
const PERIOD_S = Number(flag('period-s') ?? TRAFFIC_PERIOD_S);
const MODEL = 'sim-model';
/** Tokens per KV block (the sim's default --block-size). */
const BLOCK = 16;
const BOUNDS = { alpha: 0.1, beta: 0.15, lambda: 0.15, taken: 0.8 };

/** One period: what was offered, what the clients got, and the report after it. */
interface PeriodRow {
  rate: number;
  sent: number;
  ok: number;
  throttled: number;
  other: number;
  report: CapacityReport;
}

const num = (v: number | null | undefined, digits = 3) =>
  v === null || v === undefined ? '-' : Number(v.toPrecision(digits)).toString();

/** A sim of TRAFFIC_TRUTH whose KV pool never preempts (32 x ceil((320 + 128) / 16) blocks). */
const simArgs = (seed: number) => ({
  model: MODEL,
  seed,
  'alpha-ms': TRAFFIC_TRUTH.alpha,
  'beta-ms': TRAFFIC_TRUTH.beta,
  'gamma-ms': TRAFFIC_TRUTH.gamma,
  'max-num-seqs': TRAFFIC_MAX_BATCH,
  'kv-blocks': 8_192,
  'block-size': BLOCK,
  'max-model-len': 4_096,
});

/** `tokens` one-token words; a random 4-hex-digit token opens every KV block (no shared prefix). */
function trafficPrompt(tokens: number, rng: Rng): string {
  let text = '';
  for (let i = 0; i < tokens; i++) {
    text +=
      i % BLOCK === 0
        ? Math.floor(rng.next() * 0xffff)
            .toString(16)
            .padStart(4, '0')
        : ' the';
  }
  return text;
}

async function startShapeStack() {
  const redis = await startBenchRedis();
  const sims: AppHandle[] = await Promise.all(
    Array.from({ length: TRAFFIC_PODS }, (_, i) => startSim({ args: simArgs(i + 1) })),
  );
  const targets = { target_ttft_ms: TRAFFIC_TARGETS.ttftMs, target_itl_ms: TRAFFIC_TARGETS.itlMs };
  const config = writeGatewayConfig({
    pods: sims.map((sim, i) => ({ name: `pod-${i}`, url: sim.url })),
    redisUrl: redis.url,
    budget: 64,
    tenants: [{ id: 'bench', api_key_sha256: [sha256Hex(TEST_KEYS.paying)] }],
    sections: {
      scrape: { interval_ms: 100, timeout_ms: 500 },
      tuner: {
        period_s: PERIOD_S,
        min_requests: 10,
        max_batch: TRAFFIC_MAX_BATCH,
        queue_size: TRAFFIC_QUEUE,
        models: { [MODEL]: targets },
      },
    },
  });
  const gateways = await Promise.all(
    [0, 1].map((i) => startGatewayProcess({ config, replicaId: `gw-${i}` })),
  );
  const next = (period: number) => nextPeriod(gateways[0]!.url, period, PERIOD_S * 3 + 10);
  return { redis, sims, gateways, next };
}

/**
 * Open-loop Poisson arrivals at the rate of the current period (`setPeriod`), on an absolute
 * schedule restarted when the period changes; each answer counted in its period's row.
 */
function poissonLoad(gatewayUrls: string[], rows: PeriodRow[], rates: number[], rng: Rng) {
  let current = -1;
  const signal = () => {
    let resolve!: () => void;
    const promise = new Promise<void>((done) => {
      resolve = done;
    });
    return { promise, resolve };
  };
  let changed = signal();
  const pending = new Set<Promise<void>>();
  const setPeriod = (k: number) => {
    current = k;
    const previous = changed;
    changed = signal();
    previous.resolve();
  };
  const send = (row: PeriodRow, url: string) => {
    row.sent++;
    const body = JSON.stringify({
      model: MODEL,
      prompt: trafficPrompt(uniformInt(rng, TRAFFIC_INPUT[0], TRAFFIC_INPUT[1]), rng),
      max_tokens: uniformInt(rng, TRAFFIC_OUTPUT[0], TRAFFIC_OUTPUT[1]),
    });
    const request = fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${TEST_KEYS.paying}` },
      body,
      signal: AbortSignal.timeout(60_000),
    })
      .then(async (r) => {
        await r.arrayBuffer();
        if (r.status === 200) row.ok++;
        else if (r.status === 429) row.throttled++;
        else row.other++;
      })
      .catch(() => {
        row.other++;
      });
    pending.add(request);
    void request.finally(() => pending.delete(request));
  };
  const run = async () => {
    const stopAt = performance.now() + (PERIODS + 3) * PERIOD_S * 2_000;
    let [sent, next, scheduledFor] = [0, performance.now(), current];
    while (current >= 0 && current < PERIODS && performance.now() < stopAt) {
      if (scheduledFor !== current) [scheduledFor, next] = [current, performance.now()];
      next += (-Math.log(1 - rng.next()) / rates[current]!) * 1_000;
      let timer: NodeJS.Timeout | undefined;
      const fired = await Promise.race([
        new Promise<boolean>((resolve) => {
          timer = setTimeout(() => resolve(true), Math.max(0, next - performance.now()));
        }),
        changed.promise.then(() => false),
      ]);
      clearTimeout(timer);
      if (fired && current >= 0 && current < PERIODS)
        send(rows[current]!, gatewayUrls[sent++ % gatewayUrls.length]!);
    }
  };
  return { setPeriod, run, settled: () => Promise.allSettled([...pending]) };
}

/** Runs the periods; returns each period's row. */
async function runPeriods(shape: TrafficShape, stack: Awaited<ReturnType<typeof startShapeStack>>) {
  const rates = totalRates(shape, createRng(deriveSeed('rates', shape, SEED)), PERIODS);
  console.log(`offered total rates: ${rates.map((r) => r.toFixed(1)).join(' ')}`);
  const rows: PeriodRow[] = [];
  const load = poissonLoad(
    stack.gateways.map((g) => g.url),
    rows,
    rates,
    createRng(deriveSeed('requests', shape, SEED)),
  );
  let generator: Promise<void> = Promise.resolve();
  try {
    let r = await stack.next(0);
    for (let k = 0; k < PERIODS; k++) {
      const row: PeriodRow = { rate: rates[k]!, sent: 0, ok: 0, throttled: 0, other: 0, report: r };
      rows.push(row);
      load.setPeriod(k);
      if (k === 0) generator = load.run();
      r = row.report = await stack.next(r.period ?? 0);
      const pods = Object.entries(r.pods).map(
        ([name, p]) =>
          `${name} ${p.event ?? 'none'} a ${num(p.alpha_ms)} b ${num(p.beta_ms)} g ${num(p.gamma_ms)} l* ${num(p.capacity_rps)} obs ${num(p.observation?.rate)}/s`,
      );
      console.log(
        `period ${String(k + 1).padStart(2)} offered ${row.rate.toFixed(1).padStart(5)}/s sent ${row.sent} ` +
          `(so far 200 ${row.ok} 429 ${row.throttled} other ${row.other}) desired ${r.desired_pods ?? '-'} | ${pods.join(' | ')}`,
      );
    }
  } finally {
    load.setPeriod(PERIODS);
    await generator;
    await load.settled(); // the answers still in flight count when they end
  }
  return rows;
}

/** Per pod: the errors against its truth, the periods taken and a verdict. */
function podVerdicts(shape: TrafficShape, rows: PeriodRow[]): string[] {
  const verdicts: string[] = [];
  for (const [name, p] of Object.entries(rows.at(-1)!.report.pods)) {
    const events = rows.map((row) => row.report.pods[name]?.event ?? null);
    const truthLambda = maxRate(TRAFFIC_TRUTH, TRAFFIC_WORKLOAD, TRAFFIC_TARGETS);
    const observed = events.filter((e) => e !== null).length;
    const taken = events.filter((e) => e === 'updated' || e === 'bootstrapped').length;
    if (p.alpha_ms === null || p.beta_ms === null || p.gamma_ms === null) {
      console.log(`${shape} ${name}: no estimate; events ${events.join(',')}`);
      verdicts.push(`${name} FAIL (no estimate)`);
      continue;
    }
    const learned = { alpha: p.alpha_ms, beta: p.beta_ms, gamma: p.gamma_ms };
    const error = (k: keyof typeof learned) => learned[k] / TRAFFIC_TRUTH[k] - 1;
    const lambda = maxRate(learned, TRAFFIC_WORKLOAD, TRAFFIC_TARGETS) / truthLambda - 1;
    const e = { alpha: error('alpha'), beta: error('beta'), gamma: error('gamma'), lambda };
    const share = observed > 0 ? taken / observed : 0;
    console.log(
      `SUMMARY ${shape} seed ${SEED} ${name}: alpha ${pct(e.alpha)} beta ${pct(e.beta)} gamma ${pct(e.gamma)}; ` +
        `lambda* gateway ${num(p.capacity_rps)}, learned@mean-mix ${pct(e.lambda)} vs truth ${truthLambda.toFixed(2)}/s; ` +
        `taken ${taken}/${observed}; events ${events.map((x) => x ?? '-').join(',')}`,
    );
    const misses: string[] = share < BOUNDS.taken ? ['taken'] : [];
    for (const k of ['alpha', 'beta', 'lambda'] as const)
      if (Math.abs(e[k]) > BOUNDS[k]) misses.push(k);
    verdicts.push(`${name} ${misses.length === 0 ? 'PASS' : `FAIL (${misses.join(', ')})`}`);
  }
  return verdicts;
}

async function runShape(shape: TrafficShape): Promise<void> {
  const truthLambda = maxRate(TRAFFIC_TRUTH, TRAFFIC_WORKLOAD, TRAFFIC_TARGETS);
  console.log(
    `\n=== shape ${shape}, seed ${SEED}: ${PERIODS} periods of ${PERIOD_S} s; targets TTFT ${TRAFFIC_TARGETS.ttftMs} ms` +
      ` ITL ${TRAFFIC_TARGETS.itlMs} ms; lambda* (truth, mean mix) ${truthLambda.toFixed(2)}/s per pod`,
  );
  const stack = await startShapeStack();
  try {
    const rows = await runPeriods(shape, stack);
    console.log(
      `answers per period (sent/200/429/other): ${rows.map((r, k) => `${k + 1}:${r.sent}/${r.ok}/${r.throttled}/${r.other}`).join(' ')}`,
    );
    console.log(
      `${shape} desired pods: ${rows.map((r) => r.report.desired_pods ?? '-').join(' ')}`,
    );
    const verdicts = podVerdicts(shape, rows);
    console.log(
      `VERDICT ${shape} seed ${SEED}: ${verdicts.join('; ')} (bounds: >= 80% of observed periods taken, alpha 10%, beta 15%, lambda* 15%)`,
    );
  } finally {
    await Promise.all([...stack.gateways, ...stack.sims].map((app) => app.stop()));
    await stack.redis.stop();
  }
}

await runBench(async () => {
  for (const shape of SHAPES) await runShape(shape);
});
