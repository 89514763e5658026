/**
 * The capacity tuner's accuracy with real processes (docs/tuner.md): learned parameters against
 * the sim's known ones, and the predicted lambda* against a measured one.
 *
 *   npm run bench:tuner -w @fairgate/loadtest -- [--period-s 60] [--sweep-s 10] [--pods 2]
 *
 * 1. Learning: `pods` sims behind one embedded gateway that scrapes them every 100 ms and tunes
 *    every period; open-loop Poisson load straight to the sims, one operating point per period
 *    (tunerPhases in @fairgate/testkit, the same as test/tuner.test.ts). Prints each pod's
 *    learned parameters after 10 periods, their errors and lambda* from them.
 * 2. Sweep: one sim at rising rates of the acceptance workload (input 500, output 64) for
 *    `sweep-s` each after 3 s of warm-up; mean TTFT and ITL from the sim's histograms. The
 *    measured lambda* is where the binding latency crosses its target (twice the unloaded one).
 */
import { maxRate } from '@fairgate/control';
import { parseVllmMetrics } from '@fairgate/openai';
import { createRng } from '@fairgate/runtime';
import {
  TUNER_MAX_BATCH as MAX_BATCH,
  offerPhase,
  TUNER_SWEEP_WORKLOAD as SWEEP,
  startGatewayProcess,
  startSim,
  TUNER_TARGETS as TARGETS,
  TUNER_TRUTH as TRUTH,
  type TunerPhase,
  tunerGatewaySections,
  tunerPhases,
  writeGatewayConfig,
} from '@fairgate/testkit';
import { pct } from './harness/report.js';
import { flag, runBench } from './harness/stack.js';
import { type CapacityReport, nextPeriod } from './harness/tuner.js';

const PERIOD_S = Number(flag('period-s') ?? 60);
const SWEEP_S = Number(flag('sweep-s') ?? 10);
const PODS = Number(flag('pods') ?? 2);
const SEED = Number(flag('seed') ?? 20_240_607);

type Random = () => number;
type NextPeriod = (period: number) => Promise<CapacityReport>;
const pending: Promise<unknown>[] = [];

/** Step 1: one operating point per tuner period; lambda* from each pod's learned parameters. */
async function learnPhase(simUrls: string[], nextPeriod: NextPeriod, random: Random) {
  let r = await nextPeriod(0);
  for (const [k, phase] of tunerPhases().entries()) {
    const load = offerPhase(simUrls, phase, PERIOD_S - 0.15, random, pending);
    r = await nextPeriod(r.period ?? 0);
    await load;
    const p = r.pods['pod-0']!;
    console.log(
      `period ${k + 1}: rate ${phase.rate.toFixed(1)}/s i ${phase.input} o ${phase.output}  ` +
        `pod-0 ${p.event} nis ${p.nis?.toFixed(2)} alpha ${p.alpha_ms} beta ${p.beta_ms} gamma ${p.gamma_ms}`,
    );
  }
  await Promise.all(pending);
  const learned: Record<string, number> = {};
  for (const [name, p] of Object.entries(r.pods)) {
    const params = { alpha: p.alpha_ms!, beta: p.beta_ms!, gamma: p.gamma_ms! };
    learned[name] = maxRate(params, SWEEP, TARGETS);
    console.log(
      `${name}: alpha ${pct(params.alpha / TRUTH.alpha - 1)} beta ${pct(params.beta / TRUTH.beta - 1)} ` +
        `gamma ${pct(params.gamma / TRUTH.gamma - 1)} (filter std ${p.relative_std?.map((s) => pct(s)).join(' ')}; ` +
        `updates ${p.updates}, rejected ${p.rejected}); lambda* ${learned[name]!.toFixed(2)}/s`,
    );
  }
  return learned;
}

/**
 * Step 2: the acceptance workload at rising rates on one sim; the measured lambda*, where the
 * binding latency crosses its target between the lowest realized rate that missed and the
 * highest one below it that met both (realized rates differ from the offered ones: Poisson).
 */
async function sweepPhase(simUrl: string, random: Random): Promise<number> {
  const modelLambda = maxRate(TRUTH, SWEEP, TARGETS);
  const scrape = async () => parseVllmMetrics(await (await fetch(`${simUrl}/metrics`)).text());
  const rows: { rate: number; ttft: number; itl: number; ok: boolean }[] = [];
  for (const factor of [0.5, 0.7, 0.8, 0.9, 0.95, 1, 1.05, 1.1, 1.2, 1.3, 1.45]) {
    const phase: TunerPhase = { rate: modelLambda * factor, input: 500, output: 64 };
    await offerPhase([simUrl], phase, 3, random, pending);
    const before = await scrape();
    await offerPhase([simUrl], phase, SWEEP_S, random, pending);
    const after = await scrape();
    const n = after.ttft!.count - before.ttft!.count;
    const ttft = ((after.ttft!.sum - before.ttft!.sum) / n) * 1_000;
    const itl =
      ((after.itl!.sum - before.itl!.sum) / (after.itl!.count - before.itl!.count)) * 1_000;
    const ok = ttft <= TARGETS.ttftMs && itl <= TARGETS.itlMs;
    rows.push({ rate: n / SWEEP_S, ttft, itl, ok });
    console.log(
      `sweep ${(n / SWEEP_S).toFixed(2)}/s: TTFT ${ttft.toFixed(1)} ms ITL ${itl.toFixed(2)} ms ${ok ? 'within' : 'MISSES'} targets`,
    );
    if (!ok && rows.filter((x) => !x.ok).length >= 2) break;
  }
  await Promise.all(pending);
  const firstMiss = rows.filter((x) => !x.ok).sort((a, b) => a.rate - b.rate)[0];
  const lastOk = rows
    .filter((x) => x.ok && (!firstMiss || x.rate < firstMiss.rate))
    .sort((a, b) => b.rate - a.rate)[0];
  if (!lastOk || !firstMiss) return lastOk?.rate ?? 0;
  const slack = (x: typeof lastOk) =>
    Math.min(TARGETS.ttftMs / x.ttft - 1, TARGETS.itlMs / x.itl - 1);
  const [a, b] = [slack(lastOk), slack(firstMiss)];
  return lastOk.rate + ((firstMiss.rate - lastOk.rate) * a) / (a - b);
}

async function main() {
  const args = { model: 'sim-model', 'max-num-seqs': MAX_BATCH, 'kv-blocks': 65_536 };
  const truth = { 'alpha-ms': TRUTH.alpha, 'beta-ms': TRUTH.beta, 'gamma-ms': TRUTH.gamma };
  const sims = await Promise.all(
    Array.from({ length: PODS }, () =>
      startSim({ args: { ...args, ...truth, 'max-model-len': 8_192 } }),
    ),
  );
  const config = writeGatewayConfig({
    pods: sims.map((sim, i) => ({ name: `pod-${i}`, url: sim.url })),
    sections: tunerGatewaySections(PERIOD_S),
  });
  const gateway = await startGatewayProcess({ config, replicaId: 'bench' });
  const next = (period: number) => nextPeriod(gateway.url, period, PERIOD_S * 3 + 10);

  console.log(
    `truth alpha ${TRUTH.alpha} beta ${TRUTH.beta} gamma ${TRUTH.gamma}, N ${MAX_BATCH}, ` +
      `${PODS} pods, period ${PERIOD_S} s; targets TTFT ${TARGETS.ttftMs} ms ITL ${TARGETS.itlMs} ms`,
  );
  const rng = createRng(SEED);
  const random = () => rng.next();
  const learned = await learnPhase(
    sims.map((sim) => sim.url),
    next,
    random,
  );
  const measured = await sweepPhase(sims[0]!.url, random);
  const modelLambda = maxRate(TRUTH, SWEEP, TARGETS);
  console.log(`measured lambda* (sweep): ${measured.toFixed(2)}/s`);
  console.log(
    `model lambda* with the true parameters: ${modelLambda.toFixed(2)}/s (${pct(modelLambda / measured - 1)})`,
  );
  for (const [name, lambda] of Object.entries(learned)) {
    console.log(
      `${name} lambda* from learned parameters: ${lambda.toFixed(2)}/s (${pct(lambda / measured - 1)})`,
    );
  }
}

await runBench(main);
