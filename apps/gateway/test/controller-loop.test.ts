import { parseConfig } from '@fairgate/config';
import { decodeState } from '@fairgate/control';
import { type Fence, LocalScheduler, type Scheduler } from '@fairgate/scheduler';
import { createGatewayMetrics } from '@fairgate/telemetry';
import { sha256Hex } from '@fairgate/testkit';
import { describe, expect, it } from 'vitest';
import { ControllerLoop } from '../src/control/controller-loop.js';
import { LeaderElection } from '../src/control/election.js';
import { LatencyRecorder } from '../src/control/latency-recorder.js';
import { controllerSettings } from '../src/control/settings.js';
import { WriteLedger } from '../src/control/write-ledger.js';

/**
 * The leader's controller loop on the in-process scheduler (the real LocalScheduler, whose
 * clock can be moved to play a store whose leases lapse while this process still believes
 * in its own). Cross-process failover is in test/controller-failover.test.ts.
 */
const CONFIG = parseConfig({
  tenants: [{ id: 't', api_key_sha256: [sha256Hex('k')] }],
  pods: [
    { name: 'pod-a', url: 'http://127.0.0.1:1' },
    { name: 'pod-b', url: 'http://127.0.0.1:2' },
    { name: 'pod-c', url: 'http://127.0.0.1:3' },
  ],
  scheduler: { queue_ttl_ms: 200 },
  controller: {
    target_p99_ttft_s: 1,
    tick_s: 0.1,
    window_s: 5,
    cap_per_worker: 12,
    min_samples: 10,
  },
});
const SETTINGS = controllerSettings(CONFIG).config;

async function pool(clock?: () => number): Promise<LocalScheduler> {
  const scheduler = new LocalScheduler(clock ? { now: clock } : {});
  await scheduler.configure({ initialBudget: 5 });
  await scheduler.upsertTenants([{ id: 't' }]);
  await scheduler.upsertPods([
    { name: 'pod-a', cap: 100 },
    { name: 'pod-b', cap: 100 },
    { name: 'pod-c', cap: 100, healthy: false },
  ]);
  return scheduler;
}

function leaderOn(scheduler: Scheduler, replica: string) {
  const metrics = createGatewayMetrics({ replica });
  const ledger = new WriteLedger(metrics);
  const election = new LeaderElection({
    store: scheduler,
    replica,
    leaseTtlMs: 60_000,
    renewMs: 60_000,
  });
  const loop = new ControllerLoop({
    scheduler,
    election,
    config: () => CONFIG,
    metrics,
    ledger,
    log: () => {},
  });
  return { metrics, ledger, election, loop };
}

async function elected(election: LeaderElection): Promise<Fence> {
  election.start();
  for (let i = 0; i < 1_000 && !election.fence; i += 1) await new Promise((r) => setTimeout(r, 2));
  if (!election.fence) throw new Error('not elected');
  return election.fence;
}

describe('controller loop', () => {
  it('writes budget = cap x healthy pods with its state; the next leader continues from it', async () => {
    const scheduler = await pool();
    const a = leaderOn(scheduler, 'ra');
    const fenceA = await elected(a.election);

    const first = await a.loop.tick(fenceA);
    expect(first).toMatchObject({
      tick: 1,
      kind: 'hold',
      code: 'few_samples',
      capAfter: 12,
      budget: 24,
    });
    let snapshot = await scheduler.snapshot();
    expect(snapshot.budget).toBe(24); // 12 per worker x 2 healthy pods (pod-c is ejected)
    expect(decodeState(snapshot.controllerState, SETTINGS).writer).toEqual({
      replica: 'ra',
      epoch: 1,
    });

    // Slow first tokens on two replicas' recorders: the merged window is above the band.
    for (let replica = 0; replica < 2; replica += 1) {
      const recorder = new LatencyRecorder({ scheduler });
      for (let i = 0; i < 20; i += 1) recorder.recordTtft(2.5, 0);
      await recorder.flush();
    }
    const second = await a.loop.tick(fenceA);
    expect(second).toMatchObject({
      tick: 2,
      kind: 'decrease',
      code: 'above_band',
      capBefore: 12,
      capAfter: 9,
      budget: 18,
      samples: 40,
    });
    expect((await scheduler.snapshot()).budget).toBe(18);
    expect(a.ledger.view().accepted_writes_by_epoch).toEqual({ 1: 2 });
    const metrics = await a.metrics.registry.metrics();
    expect(metrics).toMatch(/fairgate_budget\{[^}]*\} 18/);
    expect(metrics).toMatch(/fairgate_cap_per_worker\{[^}]*\} 9/);
    expect(metrics).toMatch(/fairgate_controller_actions_total\{action="decrease"[^}]*\} 1/);
    expect(metrics).toMatch(/fairgate_controller_p99_ttft_seconds\{[^}]*\} 2\.\d+/);

    // ra shuts down; rb leads in epoch 2 and carries on: tick 3, in the cooldown ra started.
    await a.election.stop();
    const b = leaderOn(scheduler, 'rb');
    const fenceB = await elected(b.election);
    expect(fenceB.epoch).toBe(2);
    const third = await b.loop.tick(fenceB);
    expect(third).toMatchObject({
      tick: 3,
      kind: 'hold',
      code: 'cooldown',
      capBefore: 9,
      capAfter: 9,
      budget: 18,
    });
    snapshot = await scheduler.snapshot();
    const stored = decodeState(snapshot.controllerState, SETTINGS);
    expect(stored.writer).toEqual({ replica: 'rb', epoch: 2 });
    expect(stored.state.actions.map((action) => action.tick)).toEqual([1, 2, 3]);
    await b.election.stop();
  });

  it('drops the tick when leadership is lost mid-tick, and the fence refuses a write already on its way', async () => {
    let skewMs = 0;
    const scheduler = await pool(() => Date.now() + skewMs);
    // Store time jumps past the lease (the store's view, not ours): an intruder takes over.
    const loseLeaseInStore = async () => {
      skewMs += 120_000;
      expect(await scheduler.acquireLeadership('intruder', 600_000)).toMatchObject({
        leader: true,
      });
    };
    const a = leaderOn(scheduler, 'ra');
    const fence = await elected(a.election);
    expect(await a.loop.tick(fence)).toMatchObject({ tick: 1 });
    const before = await scheduler.snapshot();

    // 1. Lost before the tick's first fenced call: the peak take is refused, nothing written.
    await loseLeaseInStore();
    expect(a.election.holds(fence)).toBe(true); // this process cannot know yet
    expect(await a.loop.tick(fence)).toBeNull();
    expect(a.ledger.view()).toMatchObject({
      stale_writes_rejected: { renew: 0, take_peak: 1, control: 0 },
      dropped_ticks: 1,
    });

    // 2. Lost between the step and its write: the write itself is refused.
    const b = leaderOn(scheduler, 'rb');
    await a.election.stop();
    skewMs += 700_000; // the intruder's lease lapses too
    const fenceB = await elected(b.election);
    const racing = new Proxy(scheduler, {
      get(target, property) {
        if (property === 'setControl') {
          return async (...args: Parameters<Scheduler['setControl']>) => {
            await loseLeaseInStore();
            return target.setControl(...args);
          };
        }
        const value = Reflect.get(target, property, target);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    const loopB = new ControllerLoop({
      scheduler: racing,
      election: b.election,
      config: () => CONFIG,
      metrics: b.metrics,
      ledger: b.ledger,
      log: () => {},
    });
    expect(await loopB.tick(fenceB)).toBeNull();
    expect(b.ledger.view()).toMatchObject({
      stale_writes_rejected: { renew: 0, take_peak: 0, control: 1 },
      dropped_ticks: 1,
      accepted_writes_by_epoch: {},
    });
    const after = await scheduler.snapshot();
    expect([after.budget, after.controllerState]).toEqual([before.budget, before.controllerState]);
    expect(await b.metrics.registry.metrics()).toMatch(
      /fairgate_stale_fenced_writes_total\{operation="control"[^}]*\} 1/,
    );
    await b.election.stop();
  });

  it('leads on a timer: ticks every tick_s while leading, none after stepping down', async () => {
    const scheduler = await pool();
    const a = leaderOn(scheduler, 'ra');
    const fence = await elected(a.election);
    a.loop.lead(fence);
    for (let i = 0; i < 500; i += 1) {
      const state = decodeState((await scheduler.snapshot()).controllerState, SETTINGS).state;
      if (state.tick >= 3) break;
      await new Promise((r) => setTimeout(r, 10));
    }
    a.loop.stepDown();
    const ticks = decodeState((await scheduler.snapshot()).controllerState, SETTINGS).state.tick;
    expect(ticks).toBeGreaterThanOrEqual(3);
    await new Promise((r) => setTimeout(r, 350));
    const later = decodeState((await scheduler.snapshot()).controllerState, SETTINGS).state.tick;
    expect(later - ticks).toBeLessThanOrEqual(1); // at most the tick already running
    await a.loop.stop();
    await a.election.stop();
  });
});
