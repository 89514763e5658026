import { ConfigError, parseConfig } from '@fairgate/config';
import {
  analyze,
  decodePodTuner,
  decodeState,
  emptyGaugeSums,
  type PodParams,
} from '@fairgate/control';
import type { VllmMetrics } from '@fairgate/openai';
import { type Fence, LocalScheduler } from '@fairgate/scheduler';
import { createGatewayMetrics } from '@fairgate/telemetry';
import { sha256Hex } from '@fairgate/testkit';
import { describe, expect, it } from 'vitest';
import { ControllerLoop } from '../src/control/controller-loop.js';
import { LeaderElection } from '../src/control/election.js';
import type { PodScrape } from '../src/control/pod-scraper.js';
import { controllerSettings } from '../src/control/settings.js';
import { TunerLoop } from '../src/control/tuner-loop.js';
import { WriteLedger } from '../src/control/write-ledger.js';

/**
 * The leader's tuner loop on the in-process scheduler, fed scrapes whose counters grow as
 * the queueing model says a pod with known parameters would (noise-free): the loop turns
 * them into observations, runs the EKF, stores its state so the next leader continues, and
 * publishes the report and the metrics. The real sims are in test/tuner.test.ts.
 */
const truth: PodParams = { alpha: 8, beta: 0.05, gamma: 0.0005 };

function config(extra: Record<string, unknown> = {}) {
  return parseConfig({
    tenants: [{ id: 't', api_key_sha256: [sha256Hex('k')] }],
    pods: [{ name: 'pod-a', url: 'http://127.0.0.1:1' }],
    tuner: { period_s: 1, max_batch: 64, queue_size: 100, min_requests: 10 },
    ...extra,
  });
}

/** A pod whose cumulative vLLM counters follow the model at the rates and lengths given. */
class ModelPod {
  atMs = 0;
  ttft = { sum: 0, count: 0 };
  itl = { sum: 0, count: 0 };
  prompt = 0;
  generated = { sum: 0, count: 0 };

  run(seconds: number, rate: number, input: number, output: number): PodScrape {
    const r = analyze(
      truth,
      { inputTokens: input, outputTokens: output - 1, maxBatch: 64, maxQueue: 100 },
      rate,
    );
    const n = rate * seconds;
    this.atMs += seconds * 1_000;
    this.ttft = { sum: this.ttft.sum + (n * r.ttftMs) / 1e3, count: this.ttft.count + n };
    const gaps = n * (output - 1);
    this.itl = { sum: this.itl.sum + (gaps * r.itlMs) / 1e3, count: this.itl.count + gaps };
    this.prompt += n * input;
    this.generated = { sum: this.generated.sum + n * output, count: this.generated.count + n };
    const metrics: VllmMetrics = {
      cache: null,
      lora: null,
      models: ['m'],
      waiting: 0,
      running: r.meanBatch,
      kvCacheUsage: 0.1,
      ttft: { ...this.ttft },
      itl: { ...this.itl },
      promptTokens: this.prompt,
      generationTokens: this.generated.sum,
      requestSuccess: this.generated.count,
      requestPromptTokens: null,
      requestGenerationTokens: { ...this.generated },
      queueTime: null,
    };
    // No gauge samples: the filter takes the chain's occupancy at the period's rate, which is
    // what generated these counters (the measured-occupancy path is tested in packages/control
    // and against real sims in test/tuner.test.ts).
    return { pod: 'pod-a', atMs: this.atMs, metrics, gauges: emptyGaugeSums() };
  }
}

/** Light first, then rates and lengths that vary from period to period. */
const PERIODS: [number, number, number][] = [
  [0.5, 800, 64],
  [12, 300, 40],
  [3, 1500, 200],
  [8, 600, 120],
  [2, 2500, 60],
  [15, 200, 20],
  [4, 1200, 300],
  [6, 900, 90],
  [10, 400, 150],
  [3, 2000, 250],
  [7, 700, 50],
];

async function leader(scheduler: LocalScheduler, replica: string) {
  const election = new LeaderElection({
    store: scheduler,
    replica,
    leaseTtlMs: 60_000,
    renewMs: 60_000,
  });
  election.start();
  for (let i = 0; i < 500 && !election.fence; i++) await new Promise((r) => setTimeout(r, 2));
  if (!election.fence) throw new Error('not elected');
  return { election, fence: election.fence as Fence };
}

async function pool() {
  const scheduler = new LocalScheduler();
  await scheduler.configure({});
  await scheduler.upsertTenants([{ id: 't' }]);
  await scheduler.upsertPods([{ name: 'pod-a', cap: 64 }]);
  return scheduler;
}

function loop(scheduler: LocalScheduler, election: LeaderElection, scrape: () => PodScrape) {
  const metrics = createGatewayMetrics({ replica: 'r' });
  const tuner = new TunerLoop({
    store: scheduler,
    election,
    config: () => config(),
    metrics,
    scrapes: { latest: () => scrape() },
    log: () => {},
  });
  return { tuner, metrics };
}

describe('tuner loop', () => {
  it('learns the pod from its scrapes, stores its state and reports capacity', async () => {
    const scheduler = await pool();
    const { election, fence } = await leader(scheduler, 'r1');
    const pod = new ModelPod();
    let current = pod.run(1, 0.1, 800, 64);
    const { tuner, metrics } = loop(scheduler, election, () => current);
    expect(await tuner.tick(fence)).not.toBeNull(); // baseline
    expect(tuner.report!.pods['pod-a']!.alphaMs).toBeNull();
    for (const [rate, input, output] of PERIODS) {
      current = pod.run(20, rate, input, output);
      await tuner.tick(fence);
    }
    const report = tuner.report!;
    const p = report.pods['pod-a']!;
    expect(p.model).toBe('m');
    expect(p.updates).toBeGreaterThanOrEqual(9);
    expect(Math.abs(p.alphaMs! / truth.alpha - 1)).toBeLessThan(0.05);
    expect(Math.abs(p.betaMs! / truth.beta - 1)).toBeLessThan(0.05);
    expect(Math.abs(p.gammaMs! / truth.gamma - 1)).toBeLessThan(0.05);
    expect(p.lambdaStar).toBeGreaterThan(0);
    expect(report.models.m!.targets!.source).toBe('inferred');
    // The last period's need, unrounded; the signal holds the largest recent need until
    // fewer pods have done for scale_down_periods (scale-signal.ts).
    expect(report.need).toBeCloseTo(7 / p.lambdaStar!, 9);
    expect(report.desiredPods).toBeGreaterThanOrEqual(Math.ceil(7 / p.lambdaStar!));
    // A quiet period (too few requests for an observation) is still sized, from the pod's
    // last observation: the need follows the rate down, so the signal can fall at low load.
    const lambdaStar = p.lambdaStar!;
    current = pod.run(20, 0.3, 800, 64);
    await tuner.tick(fence);
    expect(tuner.report!.pods['pod-a']!.observation).toBeNull();
    expect(tuner.report!.need).toBeCloseTo(0.3 / lambdaStar, 6);
    const stored = decodePodTuner(await scheduler.getLeaderData('tuner:pod-a'));
    expect(stored.problem).toBeUndefined();
    expect(stored.state.filter!.updates).toBe(tuner.report!.pods['pod-a']!.updates);
    expect(JSON.parse((await scheduler.getLeaderData('capacity'))!).period).toBe(13);
    const text = await metrics.registry.metrics();
    const alpha = /fairgate_tuner_alpha_ms\{pod="pod-a",replica="r"\} (\S+)/.exec(text);
    expect(Number(alpha?.[1])).toBeCloseTo(p.alphaMs!, 9);
    expect(text).toMatch(/fairgate_capacity_rps\{pod="pod-a",replica="r"\} \d/);
    expect(text).toMatch(/fairgate_desired_pods\{replica="r"\} \d/);
    expect(text).toMatch(/fairgate_tuner_nis\{pod="pod-a",replica="r"\} /);
    await election.stop();

    // The next leader continues from the stored filter.
    const next = await leader(scheduler, 'r2');
    const second = loop(scheduler, next.election, () => current);
    await second.tuner.tick(next.fence); // baseline
    expect(second.tuner.report!.pods['pod-a']!.updates).toBe(p.updates);
    current = pod.run(20, 5, 1000, 100);
    await second.tuner.tick(next.fence);
    expect(second.tuner.report!.pods['pod-a']!.updates).toBe(p.updates + 1);
    expect(second.tuner.report!.pods['pod-a']!.event).toBe('updated');
    // The old leader's fence is refused.
    expect(await scheduler.setLeaderData(fence, 'tuner:pod-a', '{}')).toBe(false);
    await next.election.stop();
  });

  it('skips quiet periods and drops a period without leadership', async () => {
    const scheduler = await pool();
    const { election, fence } = await leader(scheduler, 'r1');
    const pod = new ModelPod();
    let current = pod.run(1, 0.1, 800, 64);
    const { tuner } = loop(scheduler, election, () => current);
    await tuner.tick(fence);
    current = pod.run(1, 5, 800, 64); // 5 first tokens < min_requests
    await tuner.tick(fence);
    const quiet = tuner.report!.pods['pod-a']!;
    expect(quiet.observation).toBeNull();
    expect(quiet.observedRate).toBeCloseTo(5, 6);
    // The skipped period is counted, with its reason, in the stored state and the report.
    expect(quiet.counts.no_observation).toBe(1);
    expect(quiet.history.map((r) => [r.outcome, r.reason])).toEqual([
      ['no_observation', 'too_few_requests'],
    ]);
    const stored = decodePodTuner(await scheduler.getLeaderData('tuner:pod-a'));
    expect(stored.problem).toBeUndefined();
    expect(stored.state.filter).toBeNull();
    expect(stored.state.counts.no_observation).toBe(1);
    await election.stop();
    current = pod.run(10, 5, 800, 64);
    expect(await tuner.tick(fence)).toBeNull();
  });
});

describe('controller.bootstrap: model', () => {
  const base = {
    controller: { target_p99_ttft_s: 1, tick_s: 0.1, window_s: 5, cap_per_worker: 12 },
    scheduler: { queue_ttl_ms: 200 },
  };

  async function controllerWith(suggestion: { startCap: number; ceilingCap: number } | null) {
    const scheduler = await pool();
    const { election, fence } = await leader(scheduler, 'r1');
    const cfg = config({ ...base, controller: { ...base.controller, bootstrap: 'model' } });
    const metrics = createGatewayMetrics({ replica: 'r1' });
    const controller = new ControllerLoop({
      scheduler,
      election,
      config: () => cfg,
      metrics,
      ledger: new WriteLedger(metrics),
      log: () => {},
      capacity: () => suggestion,
    });
    return { scheduler, election, fence, controller, cfg };
  }

  it('waits for the tuner before writing a first state', async () => {
    const { scheduler, election, fence, controller } = await controllerWith(null);
    expect(await controller.tick(fence)).toBeNull();
    expect((await scheduler.snapshot()).controllerState).toBeNull();
    await election.stop();
  });

  it('starts at the concurrency at lambda* and is capped at the ceiling', async () => {
    const { scheduler, election, fence, controller, cfg } = await controllerWith({
      startCap: 9,
      ceilingCap: 20,
    });
    const action = await controller.tick(fence);
    expect(action).not.toBeNull();
    const snapshot = await scheduler.snapshot();
    const state = decodeState(snapshot.controllerState, controllerSettings(cfg).config).state;
    expect(state.capPerWorker).toBe(9);
    expect(action!.capAfter).toBeLessThanOrEqual(20);
    await election.stop();
  });

  it('is a config option, none by default', () => {
    expect(config().controller.bootstrap).toBe('none');
    expect(() => config({ controller: { bootstrap: 'maybe' } })).toThrow(ConfigError);
  });
});

describe('tuner and scrape config', () => {
  it('has the documented defaults', () => {
    const c = parseConfig({
      tenants: [{ id: 't', api_key_sha256: [sha256Hex('k')] }],
      pods: [{ name: 'p', url: 'http://127.0.0.1:1' }],
    });
    expect(c.scrape).toEqual({ interval_ms: 100, timeout_ms: 500 });
    expect(c.tuner).toEqual({
      enabled: true,
      period_s: 60,
      slo_multiplier: 3,
      min_requests: 10,
      max_batch: 256,
      queue_size: 100,
      models: {},
      scale_down_periods: 3,
      scale_tolerance: 0.1,
      min_pods: 1,
    });
  });

  it('takes explicit targets only in pairs, and k > 1', () => {
    const models = (m: Record<string, unknown>) => config({ tuner: { models: { m } } });
    expect(
      models({ target_ttft_ms: 500, target_itl_ms: 50, max_batch: 32 }).tuner.models.m,
    ).toEqual({ target_ttft_ms: 500, target_itl_ms: 50, max_batch: 32 });
    expect(() => models({ target_ttft_ms: 500 })).toThrow(/set together/);
    expect(() => config({ tuner: { slo_multiplier: 1 } })).toThrow(ConfigError);
    expect(() => config({ scrape: { interval_ms: 5 } })).toThrow(ConfigError);
  });
});
