import { type AppHandle, type RedisHandle, startRedis, startSim, stopAll } from '@fairgate/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type Action,
  adminState,
  clientP99S,
  closedLoopLoad,
  controllerEnv,
  controllerGatewayConfig,
  sleep,
  startControlledGateways,
  TrajectoryRecorder,
} from './support/controller-harness.js';

/**
 * The controller in a closed loop with sims of known capacity.
 *
 * Each sim runs iterations of alpha + the work of every sequence in its batch (docs/sim.md:
 * alpha 40 ms, beta 2 ms per processed token, batch up to 256), so its TTFT grows with the
 * requests it holds, and the gateway adds queue wait (TTL 100 ms, 4 waiting at most). The
 * target 0.6 s (band 0.48..0.72 s) is met at about 30-40 requests per pod: 256 per worker
 * is far too high under overload (120 closed-loop clients: 60 per pod, p99 ~1 s), 4 per
 * worker far too low with headroom (60 clients, p99 ~0.2 s at 4 per pod).
 */
const TARGET_S = 0.6;
const BAND = [TARGET_S * 0.8, TARGET_S * 1.2] as const;
const TICK_S = 0.5;
const WINDOW_S = 3;

describe('controller closed loop (2 sims, 2 gateway replicas)', () => {
  let redis: RedisHandle;
  let sims: AppHandle[];

  beforeAll(async () => {
    redis = await startRedis();
    sims = await Promise.all(
      [0, 1].map(() =>
        startSim({ args: { 'alpha-ms': 40, 'beta-ms': 2, 'gamma-ms': 0, model: 'sim-model' } }),
      ),
    );
  }, 60_000);

  afterAll(async () => {
    await stopAll();
    await redis?.stop();
  });

  async function run(capPerWorker: number, clients: number, seconds: number) {
    const config = controllerGatewayConfig(redis.url, sims, 100);
    const env = controllerEnv({
      target_p99_ttft_s: TARGET_S,
      tick_s: TICK_S,
      window_s: WINDOW_S,
      cap_per_worker: capPerWorker,
      cap_per_worker_min: 2,
      cap_per_worker_max: 256,
      min_samples: 20,
    });
    const replicas = [`cl-${capPerWorker}-a`, `cl-${capPerWorker}-b`];
    const gateways = await startControlledGateways(config, replicas, env);
    const recorder = new TrajectoryRecorder(() => gateways);
    recorder.start(1_000);
    const control = { stop: false };
    const loadStartedAt = performance.now();
    const load = closedLoopLoad(gateways, clients, control);
    await sleep(seconds * 1_000);
    const loadEndedAt = performance.now();
    // Ticks up to here ran under load; later ones see it drain.
    const lastLoadedTick = (await adminState(gateways[0] as AppHandle)).controller.tick;
    control.stop = true;
    await load.done;
    await sleep(1_200);
    recorder.stop();
    await Promise.all(gateways.map((g) => g.stop()));
    console.log(
      `start ${capPerWorker}/worker, ${clients} clients, ${seconds} s: ${JSON.stringify(load.counters)}\n${recorder.format()}`,
    );
    const trajectory = recorder.ordered().filter((a) => a.tick <= lastLoadedTick);
    expect(trajectory.map((a) => a.tick)).toEqual(trajectory.map((_, i) => i + 1));
    expect(load.counters.failed).toBe(0);
    // The p99 TTFT the clients measured, per window of the controller's length (3 s).
    const clientWindows: Array<{ fromS: number; p99S: number | null }> = [];
    for (
      let from = loadStartedAt;
      from + WINDOW_S * 1_000 <= loadEndedAt;
      from += WINDOW_S * 1_000
    ) {
      clientWindows.push({
        fromS: Math.round((from - loadStartedAt) / 1_000),
        p99S: clientP99S(load.ttfts, from, from + WINDOW_S * 1_000),
      });
    }
    console.log(
      `client p99 TTFT per ${WINDOW_S} s: ${clientWindows.map((w) => `${w.fromS}s ${w.p99S?.toFixed(3)}`).join(', ')}`,
    );
    return { trajectory, clientWindows };
  }

  const inBand = (a: Action) =>
    typeof a.p99S === 'number' && a.p99S >= BAND[0] && a.p99S <= BAND[1];
  /** Ticks whose action the window's p99 decided (not held by cooldown or too few samples). */
  const decided = (a: Action) => !['cooldown', 'few_samples'].includes(a.code);

  it('started far too high (256 per worker) under overload: p99 comes into the band and stays', async () => {
    // 120 clients: 60 requests per pod at the start, p99 TTFT well above the band.
    const { trajectory, clientWindows } = await run(256, 120, 30);
    const firstDecrease = trajectory.find((a) => a.kind === 'decrease');
    expect(firstDecrease).toBeDefined();
    expect(typeof firstDecrease?.p99S === 'number' && firstDecrease.p99S > BAND[1]).toBe(true);
    // Cut from what was in flight (80 per worker), not from the unused 256.
    expect(firstDecrease?.capAfter).toBeLessThanOrEqual(80);
    // Entered for good: the first p99-decided tick in the band after the last decrease.
    const lastDecrease = trajectory.findLastIndex((a) => a.kind === 'decrease');
    const entered = trajectory.findIndex((a, i) => i > lastDecrease && decided(a) && inBand(a));
    expect(entered).toBeGreaterThan(-1);
    // Stays: over the second half of the run (15 s, 5 windows), tolerance 80% of ticks in
    // the band and none above 1.5x the target.
    const secondHalf = trajectory
      .slice(Math.floor(trajectory.length / 2))
      .filter((a) => typeof a.p99S === 'number');
    const share = secondHalf.filter(inBand).length / secondHalf.length;
    const worst = Math.max(...secondHalf.map((a) => a.p99S as number));
    console.log(
      `in the band for good from tick ${trajectory[entered]?.tick} (cap ${trajectory[entered]?.capAfter}); second half: ${(share * 100).toFixed(0)}% of ${secondHalf.length} ticks in band, worst p99 ${worst.toFixed(3)} s`,
    );
    expect(secondHalf.length * TICK_S).toBeGreaterThanOrEqual(12);
    expect(share).toBeGreaterThanOrEqual(0.8);
    expect(worst).toBeLessThanOrEqual(TARGET_S * 1.5);
    expect(trajectory.at(-1)?.capAfter).toBeLessThanOrEqual(64);
    // What the clients measured agrees: over the second half (5 windows of 3 s) the median
    // window's p99 TTFT is in the band, 3 windows of 5 at least are, and none is above 1.5x
    // the target. A controller fed a p99 other than the clients' converges elsewhere.
    const clientSecondHalf = clientWindows
      .filter((w) => w.fromS >= 15)
      .map((w) => w.p99S)
      .filter((p): p is number => p !== null);
    const clientPicture = `client p99 per window, second half: ${clientSecondHalf.map((p) => p.toFixed(3)).join(', ')}`;
    expect(clientSecondHalf.length, clientPicture).toBe(5);
    const median = [...clientSecondHalf].sort((a, b) => a - b)[2] as number;
    expect(median, clientPicture).toBeGreaterThanOrEqual(BAND[0]);
    expect(median, clientPicture).toBeLessThanOrEqual(BAND[1]);
    const clientInBand = clientSecondHalf.filter((p) => p >= BAND[0] && p <= BAND[1]).length;
    expect(clientInBand, clientPicture).toBeGreaterThanOrEqual(3);
    expect(Math.max(...clientSecondHalf), clientPicture).toBeLessThanOrEqual(TARGET_S * 1.5);
  }, 60_000);

  it('started far too low (4 per worker) with headroom: the budget climbs', async () => {
    // 60 clients want up to 30 requests per pod; TTFT stays under the band there.
    const { trajectory, clientWindows } = await run(4, 60, 20);
    expect(trajectory.filter((a) => a.kind === 'decrease')).toEqual([]);
    const increases = trajectory.filter((a) => a.kind === 'increase');
    // +1 per tick with no cooldown after increases: they come on consecutive ticks.
    expect(increases.length).toBeGreaterThanOrEqual(15);
    const run10 = increases.slice(0, 10).map((a) => a.tick);
    expect(run10).toEqual(run10.map((_, i) => (run10[0] ?? 0) + i));
    const last = trajectory.at(-1) as Action;
    console.log(
      `budget ${trajectory[0]?.budget} -> ${last.budget} (cap ${last.capAfter} per worker)`,
    );
    expect(last.budget).toBeGreaterThanOrEqual(5 * 8);
    for (const a of trajectory) {
      if (typeof a.p99S === 'number') expect(a.p99S).toBeLessThanOrEqual(BAND[1]);
    }
    // The clients measured the same headroom: every window's p99 TTFT under the band's top,
    // after the first (the gateways' first requests, before the controller's first samples).
    const measured = clientWindows.slice(1).map((w) => w.p99S);
    expect(
      measured.every((p) => p !== null && p <= BAND[1]),
      `client p99 per window: ${measured}`,
    ).toBe(true);
  }, 60_000);
});
