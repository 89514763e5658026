import { maxRate, serviceRate } from '@fairgate/control';
import { createRng } from '@fairgate/runtime';
import {
  type AppHandle,
  TUNER_MAX_BATCH as MAX_BATCH,
  offerPhase,
  type TunerPhase as Phase,
  startGatewayProcess,
  startSim,
  stopAll,
  TUNER_TARGETS as TARGETS,
  TEST_KEYS,
  TUNER_TRUTH as TRUTH,
  TUNER_SWEEP_WORKLOAD,
  tunerGatewaySections,
  tunerPhases,
  tunerWorkload as workload,
  writeGatewayConfig,
} from '@fairgate/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

/**
 * The capacity tuner against real fairgate-sim processes: its accuracy and its sizing.
 *
 * Two sims with known alpha, beta, gamma (a memory-bound pod: gamma large enough to move
 * its latencies, docs/tuner.md) behind one embedded gateway whose leader scrapes them every
 * 100 ms and runs the tuner every PERIOD_S. The test offers open-loop Poisson load straight
 * to the sims (the tuner reads the sims' own vLLM metrics; routing through the gateway would
 * only add its queue). Each load phase starts right after a tuner period ends (the test
 * watches /admin/capacity), so every period holds one operating point, transient included:
 *   1 light period (bootstrap), then the 9 operating points of TUNER_DESIGN (each request's
 *   lengths +-50% around the period's means): 10 periods; then base, double and half load
 *   at one workload.
 *
 * It asserts the documented accuracy bounds after 10 periods (docs/tuner.md): alpha within
 * 10%, beta within 15%, and lambda* of the learned pod within 15% of the true pod's. With 5 s
 * periods (a ~65 s test) a period holds 10-40 requests per pod, so its means are 5-10% off,
 * and gamma, whose share of the latencies is small, takes most of it: the virtual-time study
 * of this very design at 5 s (`npm run bench:tuner-harness -w @fairgate/loadtest --
 * --period-s 5 --seeds 20`) puts alpha within 6%, beta within 12% and lambda* within 8% in
 * 40 of 40 pods, gamma within 15% in 31. So gamma is held to what the filter itself claims:
 * within three of its reported standard deviations. Sizing is asserted: the model's desired
 * pods up when the offered load doubles and down when it halves, the scaling signal up with
 * it and holding one period later.
 */
const PERIOD_S = 5;
/** The documented accuracy bounds (relative errors) after 10 periods. */
const BOUNDS = { alpha: 0.1, beta: 0.15, lambda: 0.15 };
const SEED = 20_240_607;

function capacity(input: number, output: number): number {
  return serviceRate(TRUTH, workload(input, output), MAX_BATCH);
}

interface Report {
  period: number;
  desired_pods: number | null;
  pods: Record<
    string,
    {
      alpha_ms: number | null;
      beta_ms: number | null;
      gamma_ms: number | null;
      relative_std: number[] | null;
      nis: number | null;
      event: string | null;
      updates: number;
      rejected: number;
      capacity_rps: number | null;
      counts: Record<'accepted' | 'rejected' | 'reset' | 'bootstrapped' | 'no_observation', number>;
      observation: {
        rate: number;
        ttft_ms: number;
        itl_ms: number;
        queue_ms: number | null;
        mean_batch: number | null;
        noise: number[] | null;
      } | null;
    }
  >;
  models: Record<string, { total_rate: number; desired_pods: number | null }>;
}

describe('capacity tuner against fairgate-sim', () => {
  let sims: AppHandle[];
  let gateway: AppHandle;

  beforeAll(async () => {
    sims = await Promise.all(
      [0, 1].map(() =>
        startSim({
          args: {
            model: 'sim-model',
            'alpha-ms': TRUTH.alpha,
            'beta-ms': TRUTH.beta,
            'gamma-ms': TRUTH.gamma,
            'max-num-seqs': MAX_BATCH,
            'kv-blocks': 65_536,
            'max-model-len': 8_192,
          },
        }),
      ),
    );
    // Warm the sims up (JIT) before the tuner sees them: a fresh process handles its first
    // requests slowly enough to distort its light-load TTFT by up to ~15% (docs/tuner.md).
    const warmUp: Promise<unknown>[] = [];
    await offerPhase(
      sims.map((sim) => sim.url),
      { rate: capacity(500, 64) * 0.3, input: 500, output: 64 },
      4,
      rng(1),
      warmUp,
    );
    await Promise.all(warmUp);
    const config = writeGatewayConfig({
      pods: sims.map((sim, i) => ({ name: `pod-${i}`, url: sim.url })),
      sections: tunerGatewaySections(PERIOD_S),
    });
    gateway = await startGatewayProcess({ config, replicaId: 'tuner' });
  }, 60_000);

  afterAll(async () => {
    await stopAll();
  });

  async function report(): Promise<Report> {
    const res = await fetch(`${gateway.url}/admin/capacity`, {
      headers: { authorization: `Bearer ${TEST_KEYS.admin}` },
    });
    return (await res.json()) as Report;
  }

  /** Waits for the tuner period after `period` to end and returns its report. */
  async function nextPeriod(period: number): Promise<Report> {
    const deadline = performance.now() + PERIOD_S * 3_000;
    for (;;) {
      const r = await report();
      if ((r.period ?? 0) > period) return r;
      if (performance.now() > deadline) throw new Error(`no tuner period after ${period}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  const pending: Promise<unknown>[] = [];

  /**
   * Offers `phase` for one tuner period, starting right after the current one ended (the
   * requests still in flight finish in the background, as in any load change).
   */
  async function runPeriod(current: Report, phase: Phase, random: () => number) {
    const urls = sims.map((sim) => sim.url);
    const load = offerPhase(urls, phase, PERIOD_S - 0.15, random, pending);
    const after = await nextPeriod(current.period);
    await load;
    return after;
  }

  it('learns alpha, beta, gamma in 10 periods; lambda* and desired pods follow', async () => {
    const random = rng(SEED);
    let r = await nextPeriod(0); // the baseline period
    const trail: string[] = [];
    const log = (label: string, phase: Phase, rep: Report) => {
      const p = rep.pods['pod-0']!;
      trail.push(
        `${label} rate ${phase.rate.toFixed(1)}/s i ${phase.input} o ${phase.output}: ` +
          `${p.event} nis ${p.nis?.toFixed(2)} alpha ${p.alpha_ms?.toFixed(3)} ` +
          `beta ${p.beta_ms?.toFixed(4)} gamma ${p.gamma_ms?.toExponential(3)} ` +
          `obs ${JSON.stringify(p.observation && [p.observation.rate, p.observation.ttft_ms, p.observation.itl_ms].map((v) => Number(v.toPrecision(4))))}`,
      );
    };
    // Period 1: light (about one request in the pod): the bootstrap; then the design.
    for (const [k, phase] of tunerPhases().entries()) {
      r = await runPeriod(r, phase, random);
      log(k === 0 ? 'bootstrap' : `period ${k + 1}`, phase, r);
    }
    console.log(trail.join('\n'));
    for (const [name, pod] of Object.entries(r.pods)) {
      const errors = [
        pod.alpha_ms! / TRUTH.alpha - 1,
        pod.beta_ms! / TRUTH.beta - 1,
        pod.gamma_ms! / TRUTH.gamma - 1,
      ];
      console.log(
        `${name}: alpha ${pod.alpha_ms} beta ${pod.beta_ms} gamma ${pod.gamma_ms} ` +
          `errors ${errors.map((e) => `${(e * 100).toFixed(1)}%`).join(' / ')} ` +
          `filter std ${pod.relative_std?.map((s) => `${(s * 100).toFixed(1)}%`).join(' / ')} ` +
          `updates ${pod.updates} rejected ${pod.rejected}`,
      );
      expect(pod.updates).toBeGreaterThanOrEqual(2);
      // The observation was conditioned on what the leader measured: the pod's occupancy from
      // its gauge samples, its own queue time and the period's noise from its histograms.
      expect(pod.observation?.mean_batch).toBeGreaterThan(0);
      expect(pod.observation?.queue_ms).toBeGreaterThan(0);
      expect(pod.observation?.noise).toHaveLength(2);
      expect(pod.counts.bootstrapped).toBe(1);
      expect(pod.counts.accepted).toBeGreaterThanOrEqual(pod.updates);
      const picture = `${name}: errors ${errors.map((e) => `${(e * 100).toFixed(1)}%`).join(' / ')}, filter std ${pod.relative_std?.map((s) => `${(s * 100).toFixed(1)}%`).join(' / ')}`;
      expect(Math.abs(errors[0]!), picture).toBeLessThanOrEqual(BOUNDS.alpha);
      expect(Math.abs(errors[1]!), picture).toBeLessThanOrEqual(BOUNDS.beta);
      const gammaStd = pod.relative_std?.[2] ?? 0;
      expect(gammaStd, picture).toBeGreaterThan(0);
      expect(Math.abs(Math.log(pod.gamma_ms! / TRUTH.gamma)), picture).toBeLessThanOrEqual(
        3 * gammaStd,
      );
      // lambda* of the learned pod against lambda* of the true one, at one workload.
      const w = TUNER_SWEEP_WORKLOAD;
      const learned = { alpha: pod.alpha_ms!, beta: pod.beta_ms!, gamma: pod.gamma_ms! };
      const ratio = maxRate(learned, w, TARGETS) / maxRate(TRUTH, w, TARGETS);
      console.log(`${name}: lambda* learned / true = ${ratio.toFixed(3)}`);
      expect(
        Math.abs(ratio - 1),
        `${picture}, lambda* learned / true ${ratio}`,
      ).toBeLessThanOrEqual(BOUNDS.lambda);
    }

    // Sizing: base, double, half the offered load at one workload.
    const perPod = maxRate(TRUTH, TUNER_SWEEP_WORKLOAD, TARGETS);
    // The period's need (ceil(rate / lambda*)) follows the load both ways; the scaling
    // signal rises with it and holds when it falls (scale_down_periods, scale-signal.ts).
    const desired: number[] = [];
    const signal: number[] = [];
    for (const factor of [1, 2, 0.5]) {
      const phase: Phase = { rate: perPod * 0.8 * factor, input: 500, output: 64 };
      r = await runPeriod(r, phase, random);
      log(`load x${factor}`, phase, r);
      desired.push(Object.values(r.models)[0]?.desired_pods ?? Number.NaN);
      signal.push(r.desired_pods ?? Number.NaN);
    }
    console.log(`desired pods at x1, x2, x0.5: ${desired.join(', ')}; signal ${signal.join(', ')}`);
    expect(desired[1]).toBeGreaterThan(desired[0]!);
    expect(desired[2]).toBeLessThan(desired[1]!);
    expect(desired[2]).toBeLessThan(desired[0]!);
    expect(signal[1]).toBeGreaterThanOrEqual(desired[1]!);
    expect(signal[2]).toBe(signal[1]);
    await Promise.all(pending);
  }, 150_000);
});

/** A seeded stream as the plain function offerPhase draws from. */
function rng(seed: number): () => number {
  const stream = createRng(seed);
  return () => stream.next();
}
