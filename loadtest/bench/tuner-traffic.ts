/**
 * The capacity tuner on production-like traffic with real processes (issue 16): the traffic
 * shapes of the virtual-time study (bench/tuner-study/shapes.ts) sent through two gateway
 * replicas to two fairgate-sim pods, and what the tuner learned against the sims' truth.
 *
 *   npm run bench:tuner-traffic -w @fairgate/loadtest -- [--shape below,peaks,overload]
 *     [--seed 1] [--periods 13] [--period-s 10] [--slowdown]
 *
 * Per shape: one redis-server, 2 sims (TRAFFIC_TRUTH, max-num-seqs 32, KV pool far larger
 * than 32 sequences of 320 + 128 tokens, so nothing is preempted) and 2 gateway processes
 * sharing the Redis (one tenant, budget 64, scrape every 100 ms, tuner period `period-s`,
 * max_batch 32, queue_size 100, min_requests 10, explicit TRAFFIC_TARGETS). Open-loop
 * Poisson arrivals at totalRates(shape) per period, sent alternately to the two replicas
 * (/v1/completions, prompts of 20..320 one-token words with a random first token in every
 * KV block so no prompt shares a cached prefix, max_tokens 16..128). The offered rate
 * switches when the tuner's period (GET /admin/capacity) increments; `periods` periods are
 * run after the first tick. Printed per period: the offered rate, 200/429/other answers,
 * each pod's event and estimates, lambda* and desired pods; at the end per pod the errors
 * of alpha, beta, gamma, lambda* (the gateway's, at the pod's last observed mix, and
 * maxRate of the learned parameters at TRAFFIC_WORKLOAD) against maxRate(TRAFFIC_TRUTH,
 * TRAFFIC_WORKLOAD, TRAFFIC_TARGETS), the share of observed periods taken (bootstrap or
 * update, as in tuner-study/study.ts) and a verdict against the bounds.
 *
 * --slowdown (acceptance 3, shape `below` only): after period 6 sim 0 is restarted on the
 * same port with alpha, beta and gamma doubled; pod-0's estimates are then checked against
 * the new truth for the 3 periods after the restart.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { maxRate, type PodParams } from '@fairgate/control';
import { createRng, deriveSeed, type Rng, uniformInt } from '@fairgate/runtime';
import {
  type AppHandle,
  sha256Hex,
  startGatewayProcess,
  startRedis,
  startSim,
  stopAll,
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
} from './tuner-study/shapes.js';

function flag(name: string): string | undefined {
  const at = process.argv.indexOf(`--${name}`);
  return at >= 0 ? process.argv[at + 1] : undefined;
}
const SHAPES = (flag('shape') ?? TRAFFIC_SHAPES.join(',')).split(',') as TrafficShape[];
for (const s of SHAPES) {
  if (!TRAFFIC_SHAPES.includes(s)) throw new Error(`unknown shape ${s}`);
}
const SEED = Number(flag('seed') ?? 1);
const PERIODS = Number(flag('periods') ?? TRAFFIC_PERIODS);
const PERIOD_S = Number(flag('period-s') ?? TRAFFIC_PERIOD_S);
const SLOWDOWN = process.argv.includes('--slowdown');
/** The period after which --slowdown restarts sim 0, and how many periods it has to recover. */
const SLOWDOWN_AFTER = 6;
const RECOVERY_PERIODS = 3;
const MODEL = 'sim-model';
/** Tokens per KV block (the sim's default --block-size). */
const BLOCK = 16;
const BOUNDS = { alpha: 0.1, beta: 0.15, lambda: 0.15, taken: 0.8 };

interface PodView {
  alpha_ms: number | null;
  beta_ms: number | null;
  gamma_ms: number | null;
  event: string | null;
  nis: number | null;
  capacity_rps: number | null;
  observed_rate: number | null;
  observation: { rate: number; requests: number } | null;
  counts?: Record<string, number>;
}
interface CapacityBody {
  period?: number;
  source?: string;
  desired_pods: number | null;
  pods: Record<string, PodView>;
  counts?: Record<string, Record<string, number>>;
}

/** One period: what was offered, what the clients got, and the report after it. */
interface PeriodRow {
  rate: number;
  sent: number;
  ok: number;
  throttled: number;
  other: number;
  report: CapacityBody;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const pct = (v: number) =>
  Number.isFinite(v) ? `${v >= 0 ? '+' : ''}${(v * 100).toFixed(1)}%` : 'n/a';
const num = (v: number | null | undefined, digits = 3) =>
  v === null || v === undefined ? '-' : Number(v.toPrecision(digits)).toString();

function simArgs(truth: PodParams) {
  return {
    model: MODEL,
    'alpha-ms': truth.alpha,
    'beta-ms': truth.beta,
    'gamma-ms': truth.gamma,
    'max-num-seqs': TRAFFIC_MAX_BATCH,
    // 32 sequences x ceil((320 + 128) / 16) = 896 blocks at most: never preempted.
    'kv-blocks': 8_192,
    'block-size': BLOCK,
    'max-model-len': 4_096,
  };
}

/**
 * A prompt of `tokens` one-token words (docs/sim.md: 4 characters each): a random 4-hex-digit
 * token opens every KV block, so no two prompts share a cached block (the hashes are chained,
 * the first one alone would do), the rest are " the".
 */
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

async function runShape(shape: TrafficShape) {
  const rates = totalRates(shape, createRng(deriveSeed('rates', shape, SEED)), PERIODS);
  const rng = createRng(deriveSeed('requests', shape, SEED));
  const redis = await startRedis();
  const sims: AppHandle[] = await Promise.all(
    Array.from({ length: TRAFFIC_PODS }, (_, i) =>
      startSim({ args: { ...simArgs(TRAFFIC_TRUTH), seed: i + 1 } }),
    ),
  );
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
        models: {
          [MODEL]: {
            target_ttft_ms: TRAFFIC_TARGETS.ttftMs,
            target_itl_ms: TRAFFIC_TARGETS.itlMs,
          },
        },
      },
    },
  });
  const gateways = await Promise.all(
    [0, 1].map((i) => startGatewayProcess({ config, replicaId: `gw-${i}` })),
  );
  const report = async (): Promise<CapacityBody> =>
    (await (
      await fetch(`${gateways[0]!.url}/admin/capacity`, {
        headers: { authorization: `Bearer ${TEST_KEYS.admin}` },
        signal: AbortSignal.timeout(5_000),
      })
    ).json()) as CapacityBody;
  /** The report once the tuner's period exceeds `period` (bounded: 3 periods). */
  const nextPeriod = async (period: number) => {
    const until = performance.now() + PERIOD_S * 3_000 + 10_000;
    while (performance.now() < until) {
      const r = await report().catch(() => null);
      if (r && (r.period ?? 0) > period) return r;
      await sleep(50);
    }
    throw new Error(`the tuner's period did not pass ${period}`);
  };

  const truthLambda = maxRate(TRAFFIC_TRUTH, TRAFFIC_WORKLOAD, TRAFFIC_TARGETS);
  console.log(
    `\n=== shape ${shape}, seed ${SEED}: ${PERIODS} periods of ${PERIOD_S} s; truth alpha ${TRAFFIC_TRUTH.alpha} ` +
      `beta ${TRAFFIC_TRUTH.beta} gamma ${TRAFFIC_TRUTH.gamma}, N ${TRAFFIC_MAX_BATCH}; targets TTFT ` +
      `${TRAFFIC_TARGETS.ttftMs} ms ITL ${TRAFFIC_TARGETS.itlMs} ms; lambda* (truth, mean mix) ${truthLambda.toFixed(2)}/s per pod`,
  );
  console.log(`offered total rates: ${rates.map((r) => r.toFixed(1)).join(' ')}`);

  // The load: one open-loop Poisson generator whose rate follows the current period; a
  // change of period wakes it (memoryless: the next gap is drawn at the new rate).
  const rows: PeriodRow[] = [];
  let current = -1; // index of the running period; -1 before the baseline tick
  let wake: () => void = () => {};
  let changed = new Promise<void>((resolve) => {
    wake = resolve;
  });
  const setPeriod = (k: number) => {
    current = k;
    const w = wake;
    changed = new Promise<void>((resolve) => {
      wake = resolve;
    });
    w();
  };
  const pending = new Set<Promise<void>>();
  const maxRequests = Math.ceil(rates.reduce((a, r) => a + r, 0) * PERIOD_S * 2) + 100;
  const deadline = () => performance.now() + (PERIODS + 3) * PERIOD_S * 2_000;
  let generator: Promise<void> = Promise.resolve();
  const startLoad = () => {
    const stopAt = deadline();
    generator = (async () => {
      let sent = 0;
      // Arrival times on an absolute schedule (a late timer does not lower the rate),
      // restarted from now when the period changes.
      let next = performance.now();
      let scheduledFor = current;
      while (current >= 0 && current < PERIODS && sent < maxRequests) {
        if (performance.now() > stopAt) break;
        if (scheduledFor !== current) {
          scheduledFor = current;
          next = performance.now();
        }
        next += (-Math.log(1 - rng.next()) / rates[current]!) * 1_000;
        let timer: NodeJS.Timeout | undefined;
        const fired = await Promise.race([
          new Promise<boolean>((resolve) => {
            timer = setTimeout(() => resolve(true), Math.max(0, next - performance.now()));
          }),
          changed.then(() => false),
        ]);
        clearTimeout(timer);
        if (!fired || current < 0 || current >= PERIODS) continue;
        const row = rows[current]!;
        const gateway = gateways[sent % gateways.length]!;
        sent++;
        row.sent++;
        const body = JSON.stringify({
          model: MODEL,
          prompt: trafficPrompt(uniformInt(rng, TRAFFIC_INPUT[0], TRAFFIC_INPUT[1]), rng),
          max_tokens: uniformInt(rng, TRAFFIC_OUTPUT[0], TRAFFIC_OUTPUT[1]),
        });
        const request = fetch(`${gateway.url}/v1/completions`, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            authorization: `Bearer ${TEST_KEYS.paying}`,
          },
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
      }
    })();
  };

  // CPU contention shows here first (all processes share this machine's cores).
  const lag = monitorEventLoopDelay({ resolution: 10 });
  lag.enable();
  let slowTruth: PodParams | null = null;
  try {
    let r = await nextPeriod(0);
    for (let k = 0; k < PERIODS; k++) {
      rows.push({ rate: rates[k]!, sent: 0, ok: 0, throttled: 0, other: 0, report: r });
      const startedAt = performance.now();
      setPeriod(k);
      if (k === 0) startLoad();
      r = await nextPeriod(r.period ?? 0);
      rows[k]!.report = r;
      const parts = Object.entries(r.pods).map(
        ([name, p]) =>
          `${name} ${p.event ?? 'none'} a ${num(p.alpha_ms)} b ${num(p.beta_ms)} g ${num(p.gamma_ms)} ` +
          `l* ${num(p.capacity_rps)} obs ${num(p.observation?.rate)}/s`,
      );
      const row = rows[k]!;
      console.log(
        `period ${String(k + 1).padStart(2)} offered ${row.rate.toFixed(1).padStart(5)}/s sent ${row.sent} ` +
          `in ${((performance.now() - startedAt) / 1_000).toFixed(1)} s ` +
          `(so far 200 ${row.ok} 429 ${row.throttled} other ${row.other}) desired ${r.desired_pods ?? '-'} | ${parts.join(' | ')}`,
      );
      if (SLOWDOWN && shape === 'below' && k + 1 === SLOWDOWN_AFTER) {
        slowTruth = {
          alpha: TRAFFIC_TRUTH.alpha * 2,
          beta: TRAFFIC_TRUTH.beta * 2,
          gamma: TRAFFIC_TRUTH.gamma * 2,
        };
        const port = sims[0]!.port;
        await sims[0]!.stop();
        sims[0] = await startSim({ port, args: { ...simArgs(slowTruth), seed: 11 } });
        console.log(`  slowdown: sim 0 restarted on port ${port} with alpha, beta, gamma doubled`);
      }
    }
  } finally {
    setPeriod(PERIODS);
    await generator;
    // The answers still in flight are counted when they end (bounded by their timeouts).
    await Promise.allSettled([...pending]);
  }

  // Preemptions (none expected: the KV pool holds 32 sequences many times over).
  const preemptions = await Promise.all(
    sims.map(async (sim) => {
      const text = await fetch(`${sim.url}/metrics`)
        .then((r) => r.text())
        .catch(() => '');
      const line = text.split('\n').find((l) => l.startsWith('vllm:num_preemptions_total'));
      return line ? Number(line.split(' ').pop()) : Number.NaN;
    }),
  );
  console.log(
    `sim preemptions: ${preemptions.join(' ')}; load generator event-loop delay p99 ` +
      `${(lag.percentile(99) / 1e6).toFixed(1)} ms, max ${(lag.max / 1e6).toFixed(1)} ms`,
  );
  lag.disable();
  // Final answer counts per period (late answers included).
  console.log('answers per period (sent / 200 / 429 / other):');
  console.log(
    `  ${rows.map((row, k) => `${k + 1}:${row.sent}/${row.ok}/${row.throttled}/${row.other}`).join(' ')}`,
  );

  const last = rows[rows.length - 1]!.report;
  const desiredSeq = rows.map((row) => row.report.desired_pods ?? '-').join(' ');
  const offeredSeq = rows.map((row) => row.rate.toFixed(0)).join(' ');
  const verdicts: string[] = [];
  for (const [name, p] of Object.entries(last.pods)) {
    const events = rows.map((row) => row.report.pods[name]?.event ?? null);
    const podTruth = name === 'pod-0' && slowTruth ? slowTruth : TRAFFIC_TRUTH;
    const podLambda = maxRate(podTruth, TRAFFIC_WORKLOAD, TRAFFIC_TARGETS);
    const observed = events.filter((e) => e !== null).length;
    const updated = events.filter((e) => e === 'updated').length;
    const boots = events.filter((e) => e === 'bootstrapped').length;
    const taken = updated + boots;
    const counts = p.counts ?? last.counts?.[name];
    const countsText = counts ? ` counts ${JSON.stringify(counts)}` : ' (no counts field)';
    if (p.alpha_ms === null || p.beta_ms === null || p.gamma_ms === null) {
      console.log(`${shape} ${name}: no estimate; events ${events.join(',')}${countsText}`);
      verdicts.push(`${name} FAIL (no estimate)`);
      continue;
    }
    const learned = { alpha: p.alpha_ms, beta: p.beta_ms, gamma: p.gamma_ms };
    const eAlpha = learned.alpha / podTruth.alpha - 1;
    const eBeta = learned.beta / podTruth.beta - 1;
    const eGamma = learned.gamma / podTruth.gamma - 1;
    const gatewayLambda = p.capacity_rps ?? Number.NaN;
    const ownLambda = maxRate(learned, TRAFFIC_WORKLOAD, TRAFFIC_TARGETS);
    // With the slowdown's doubled pod the targets (twice the original pod's unloaded
    // latencies) are at its unloaded latencies: lambda* is 0 and only absolute values print.
    const eGatewayLambda = podLambda > 0 ? gatewayLambda / podLambda - 1 : Number.NaN;
    const eOwnLambda = podLambda > 0 ? ownLambda / podLambda - 1 : Number.NaN;
    const takenShare = observed > 0 ? taken / observed : 0;
    console.log(
      `SUMMARY ${shape} seed ${SEED} ${name}: alpha ${pct(eAlpha)} beta ${pct(eBeta)} gamma ${pct(eGamma)}; ` +
        `lambda* gateway ${gatewayLambda.toFixed(2)} (${pct(eGatewayLambda)}), learned@mean-mix ${ownLambda.toFixed(2)} ` +
        `(${pct(eOwnLambda)}) vs truth ${podLambda.toFixed(2)}/s; taken ${taken}/${observed} ` +
        `(${(takenShare * 100).toFixed(0)}%, updated ${updated}, bootstrapped ${boots}); ` +
        `events ${events.map((e) => e ?? '-').join(',')}${countsText}`,
    );
    const ok =
      takenShare >= BOUNDS.taken &&
      Math.abs(eAlpha) <= BOUNDS.alpha &&
      Math.abs(eBeta) <= BOUNDS.beta &&
      !(Math.abs(eOwnLambda) > BOUNDS.lambda);
    const misses = [
      takenShare < BOUNDS.taken ? 'taken' : '',
      Math.abs(eAlpha) > BOUNDS.alpha ? 'alpha' : '',
      Math.abs(eBeta) > BOUNDS.beta ? 'beta' : '',
      Math.abs(eOwnLambda) > BOUNDS.lambda ? 'lambda*' : '',
    ].filter(Boolean);
    verdicts.push(`${name} ${ok ? 'PASS' : `FAIL (${misses.join(', ')})`}`);
  }
  console.log(`${shape} offered total rate: ${offeredSeq}`);
  console.log(`${shape} desired pods:        ${desiredSeq}`);
  const totals = rows.reduce(
    (a, row) => ({
      sent: a.sent + row.sent,
      ok: a.ok + row.ok,
      throttled: a.throttled + row.throttled,
      other: a.other + row.other,
    }),
    { sent: 0, ok: 0, throttled: 0, other: 0 },
  );
  console.log(
    `${shape} answers: sent ${totals.sent}, 200 ${totals.ok}, 429 ${totals.throttled}, other ${totals.other}`,
  );

  if (slowTruth) {
    console.log(
      `slowdown: pod-0 against the new truth (alpha ${slowTruth.alpha}, beta ${slowTruth.beta}, gamma ${slowTruth.gamma})`,
    );
    let recoveredAt: number | null = null;
    for (let k = SLOWDOWN_AFTER; k < rows.length; k++) {
      const p = rows[k]!.report.pods['pod-0'];
      if (!p || p.alpha_ms === null || p.beta_ms === null || p.gamma_ms === null) {
        console.log(`  period ${k + 1}: no estimate (${p?.event ?? 'none'})`);
        continue;
      }
      const ea = p.alpha_ms / slowTruth.alpha - 1;
      const eb = p.beta_ms / slowTruth.beta - 1;
      const eg = p.gamma_ms / slowTruth.gamma - 1;
      const within = Math.abs(ea) <= BOUNDS.alpha && Math.abs(eb) <= BOUNDS.beta;
      if (within && recoveredAt === null) recoveredAt = k + 1;
      console.log(
        `  period ${k + 1} (${k + 1 - SLOWDOWN_AFTER} after): ${p.event ?? 'none'} alpha ${pct(ea)} beta ${pct(eb)} ` +
          `gamma ${pct(eg)} ${within ? 'within' : 'outside'} 10%/15%`,
      );
    }
    const inTime = recoveredAt !== null && recoveredAt - SLOWDOWN_AFTER <= RECOVERY_PERIODS;
    console.log(
      `VERDICT slowdown: pod-0 ${recoveredAt === null ? 'never' : `first`} within 10%/15% of the new truth` +
        `${recoveredAt === null ? '' : ` at period ${recoveredAt} (${recoveredAt - SLOWDOWN_AFTER} after the restart)`}: ` +
        `${inTime ? 'PASS' : 'FAIL'} (bound ${RECOVERY_PERIODS} periods)`,
    );
  }
  console.log(
    `VERDICT ${shape} seed ${SEED}: ${verdicts.join('; ')} (bounds: >= 80% of observed periods taken, ` +
      `alpha 10%, beta 15%, lambda* 15%)`,
  );
  await stopAll();
  await redis.stop().catch(() => {});
}

async function main() {
  for (const shape of SHAPES) await runShape(shape);
}

const onSignal = () => {
  void stopAll().finally(() => process.exit(130));
};
process.once('SIGINT', onSignal);
process.once('SIGTERM', onSignal);

main()
  .then(async () => {
    await stopAll();
  })
  .catch(async (error) => {
    console.error(error);
    await stopAll();
    process.exit(1);
  });
