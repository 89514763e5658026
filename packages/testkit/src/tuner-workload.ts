import { analyze, type PodParams, serviceRate, type Workload } from '@fairgate/control';

/**
 * The workload the capacity tuner is checked with (its accuracy bounds: docs/tuner.md), shared by
 * test/tuner.test.ts, the benchmark loadtest/bench/tuner-sweep.ts and the virtual-time
 * study loadtest/bench/tuner-harness.ts, so all three offer the same periods to the same pod.
 */

/** The sim's parameters: a memory-bound pod (docs/tuner.md: gamma 0.0001 is not identifiable). */
export const TUNER_TRUTH: PodParams = { alpha: 8, beta: 0.05, gamma: 0.0005 };
/** The sim's max-num-seqs, the model's N. */
export const TUNER_MAX_BATCH = 128;
/** The model's K. */
export const TUNER_QUEUE = 100;

/** One operating point: mean input tokens, mean output tokens, requests/s per pod. */
export interface TunerPhase {
  input: number;
  output: number;
  rate: number;
}

/** The bootstrap period: about one request in the pod (Little), input 500, output 16. */
export const TUNER_LIGHT_PHASE: TunerPhase = { rate: 5, input: 500, output: 16 };

/**
 * The 9 operating points after the bootstrap: [mean input, mean output, rate as a fraction
 * of mu(N)], spread over input 150..1000, output 40..128 and 15..50% of mu(N) (outputs of
 * at least 40 tokens and half of mu(N) at most: where the model matches the sim within
 * about 6%, docs/tuner.md). Fixed, so every run offers the same periods.
 */
export const TUNER_DESIGN: readonly (readonly [number, number, number])[] = [
  [250, 60, 0.15],
  [800, 40, 0.4],
  [300, 120, 0.45],
  [1000, 110, 0.2],
  [500, 80, 0.3],
  [150, 50, 0.5],
  [900, 70, 0.35],
  [600, 128, 0.25],
  [350, 45, 0.3],
];

/** The model's workload for mean lengths as a client asks for them (o = output - 1). */
export function tunerWorkload(input: number, output: number): Workload {
  return {
    inputTokens: input,
    outputTokens: output - 1,
    maxBatch: TUNER_MAX_BATCH,
    maxQueue: TUNER_QUEUE,
  };
}

/** The bootstrap period, then the design as rates for `truth`: the 10 learning periods. */
export function tunerPhases(truth: PodParams = TUNER_TRUTH): TunerPhase[] {
  return [
    TUNER_LIGHT_PHASE,
    ...TUNER_DESIGN.map(([input, output, utilisation]) => ({
      input,
      output,
      rate: serviceRate(truth, tunerWorkload(input, output), TUNER_MAX_BATCH) * utilisation,
    })),
  ];
}

/** The workload lambda* is measured for: input 500, output 64. */
export const TUNER_SWEEP_WORKLOAD = tunerWorkload(500, 64);

/** TTFT and ITL targets: twice the unloaded latencies of TUNER_SWEEP_WORKLOAD. */
export const TUNER_TARGETS = (() => {
  const idle = analyze(TUNER_TRUTH, TUNER_SWEEP_WORKLOAD, 1e-9);
  return { ttftMs: Math.round(idle.ttftMs * 2), itlMs: Math.round(idle.itlMs * 2 * 10) / 10 };
})();

/**
 * A prompt of `tokens` tokens (4 characters each, docs/sim.md) that shares no block with
 * any other: the sim's prefix cache would otherwise skip most of the prefill work.
 */
export function uniquePrompt(tokens: number, random: () => number): string {
  let text = '';
  for (let i = 0; i < tokens; i++) {
    text += Math.floor(random() * 0xffff)
      .toString(16)
      .padStart(4, '0');
  }
  return text;
}

/**
 * Open-loop Poisson arrivals at `phase.rate` on every sim for `seconds`, at most three
 * times the expected count each; lengths uniform within +-50% of the phase's means.
 * Returns when the last request is sent; the answers are collected in `pending`.
 */
export async function offerPhase(
  simUrls: readonly string[],
  phase: TunerPhase,
  seconds: number,
  random: () => number,
  pending: Promise<unknown>[],
): Promise<void> {
  const until = performance.now() + seconds * 1_000;
  const maxRequests = Math.ceil(phase.rate * seconds * 3) + 10;
  await Promise.all(
    simUrls.map(async (url) => {
      let next = performance.now();
      for (let sent = 0; sent < maxRequests; sent++) {
        next += (-Math.log(1 - random()) / phase.rate) * 1_000;
        if (next >= until) break;
        await new Promise((r) => setTimeout(r, Math.max(0, next - performance.now())));
        const spread = () => 0.5 + random();
        const body = JSON.stringify({
          model: 'sim-model',
          prompt: uniquePrompt(Math.round(phase.input * spread()), random),
          max_tokens: Math.max(2, Math.round(phase.output * spread())),
        });
        pending.push(
          fetch(`${url}/v1/completions`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body,
          })
            .then((r) => r.arrayBuffer())
            .catch(() => {}),
        );
      }
    }),
  );
}

/**
 * The gateway config sections the tuner is checked with: the leader scrapes every 100 ms,
 * the tuner steps every `periodS` with the workload's batch, queue and targets.
 */
export function tunerGatewaySections(periodS: number) {
  return {
    scrape: { interval_ms: 100, timeout_ms: 500 },
    tuner: {
      period_s: periodS,
      min_requests: 10,
      max_batch: TUNER_MAX_BATCH,
      queue_size: TUNER_QUEUE,
      models: {
        'sim-model': { target_ttft_ms: TUNER_TARGETS.ttftMs, target_itl_ms: TUNER_TARGETS.itlMs },
      },
    },
  };
}
