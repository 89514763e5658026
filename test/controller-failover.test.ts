import { type AppHandle, type RedisHandle, startRedis, startSim, stopAll } from '@fairgate/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type AdminState,
  adminState,
  closedLoopLoad,
  controllerEnv,
  controllerGatewayConfig,
  sleep,
  startControlledGateways,
} from './support/controller-harness.js';

/**
 * Leader failover across gateway processes under load.
 * - kill -9 the leader: another replica leads within 4 s (lease TTL 3 s, renewed every
 *   1 s; followers retry the moment the lease lapses) and continues from the stored state;
 * - SIGSTOP the new leader past its TTL, then SIGCONT: its writes are refused by the fence
 *   and counted, and it follows;
 * - across the whole run no two replicas ever had writes accepted in the same epoch (each
 *   replica reports the epochs its fenced writes were accepted in; the stored state names
 *   the leadership that wrote it).
 */
describe('leader failover (3 gateway processes, 2 sims)', () => {
  let redis: RedisHandle;
  let gateways: AppHandle[];
  const down = new Set<AppHandle>();
  /** replica -> epoch -> accepted writes, the largest count seen on its /admin/state. */
  const accepted = new Map<string, Map<number, number>>();
  /** epoch -> replicas named as the writer of the stored state. */
  const writers = new Map<number, Set<string>>();

  const live = () => gateways.filter((g) => !down.has(g));

  function audit(replica: string, state: AdminState): void {
    const byEpoch = accepted.get(replica) ?? new Map<number, number>();
    accepted.set(replica, byEpoch);
    for (const [epoch, count] of Object.entries(
      state.local.fenced_writes.accepted_writes_by_epoch,
    )) {
      byEpoch.set(Number(epoch), Math.max(byEpoch.get(Number(epoch)) ?? 0, count));
    }
    const writer = state.controller.written_by;
    if (writer) {
      const set = writers.get(writer.epoch) ?? new Set<string>();
      set.add(writer.replica);
      writers.set(writer.epoch, set);
    }
  }

  async function stateOf(gateway: AppHandle): Promise<AdminState> {
    const state = await adminState(gateway);
    audit(replicaOf(gateway), state);
    return state;
  }

  const replicaOf = (gateway: AppHandle) => `fo-${gateways.indexOf(gateway) + 1}`;
  const byReplica = (replica: string | null) =>
    gateways.find((g) => replicaOf(g) === replica) as AppHandle;

  /** Polls the live replicas until `accept(state)`; returns that state and when it was seen. */
  async function waitForState(
    accept: (state: AdminState) => boolean,
    timeoutMs: number,
  ): Promise<{ state: AdminState; at: number }> {
    const deadline = performance.now() + timeoutMs;
    while (performance.now() < deadline) {
      for (const gateway of live()) {
        const state = await stateOf(gateway).catch(() => undefined);
        if (state && accept(state)) return { state, at: performance.now() };
      }
      await sleep(50);
    }
    throw new Error('the expected controller state never appeared');
  }

  beforeAll(async () => {
    redis = await startRedis();
    const sims = await Promise.all(
      [0, 1].map(() =>
        startSim({ args: { 'alpha-ms': 20, 'beta-ms': 1, 'gamma-ms': 0, model: 'sim-model' } }),
      ),
    );
    const config = controllerGatewayConfig(redis.url, sims, 50);
    const env = controllerEnv(
      { target_p99_ttft_s: 0.3, tick_s: 0.5, window_s: 3, cap_per_worker: 4, min_samples: 20 },
      { lease_ttl_ms: 3_000, renew_ms: 1_000 },
    );
    gateways = await startControlledGateways(config, ['fo-1', 'fo-2', 'fo-3'], env);
  }, 60_000);

  afterAll(async () => {
    await stopAll();
    await redis?.stop();
  });

  it('fails over on kill -9 and fences a paused leader; one writer per epoch', async () => {
    const control = { stop: false };
    const load = closedLoopLoad(live, 60, control);
    try {
      // The controller is climbing from 4 per worker (headroom): its state changes every tick.
      const before = await waitForState(
        (s) => s.leader !== null && (s.controller.cap_per_worker ?? 0) >= 8,
        20_000,
      );
      const first = byReplica(before.state.leader);
      const firstEpoch = before.state.epoch;
      await stateOf(first);
      const lastOld = await waitForState(
        (s) => s.controller.written_by?.epoch === firstEpoch,
        2_000,
      );

      // kill -9 the leader under load.
      down.add(first);
      const killedAt = performance.now();
      await first.kill();
      const takeover = await waitForState(
        (s) => s.leader !== null && s.leader !== replicaOf(first) && s.epoch > firstEpoch,
        10_000,
      );
      const failoverMs = takeover.at - killedAt;
      console.log(
        `kill -9 ${replicaOf(first)} (epoch ${firstEpoch}) -> ${takeover.state.leader} leads in epoch ${takeover.state.epoch} after ${failoverMs.toFixed(0)} ms`,
      );
      expect(failoverMs).toBeLessThan(4_000);
      expect(takeover.state.epoch).toBe(firstEpoch + 1);

      // The new leader continues from the stored state: ticks and caps carry on.
      const continued = await waitForState(
        (s) =>
          s.controller.written_by?.epoch === firstEpoch + 1 &&
          s.controller.tick >= lastOld.state.controller.tick + 2,
        5_000,
      );
      const actions = [...continued.state.controller.actions].reverse();
      for (let i = 1; i < actions.length; i += 1) {
        expect(actions[i]?.tick).toBe((actions[i - 1]?.tick ?? 0) + 1);
        expect(actions[i]?.capBefore).toBe(actions[i - 1]?.capAfter);
      }
      const oldTick = lastOld.state.controller.tick;
      const oldCap = lastOld.state.controller.cap_per_worker ?? 0;
      const atOldTick = actions.find((a) => a.tick === oldTick);
      expect(atOldTick?.capAfter).toBe(oldCap);
      expect(continued.state.controller.cap_per_worker).toBeGreaterThanOrEqual(oldCap);
      console.log(
        `continued: epoch ${firstEpoch} stopped at tick ${oldTick} cap ${oldCap}; epoch ${firstEpoch + 1} at tick ${continued.state.controller.tick} cap ${continued.state.controller.cap_per_worker}`,
      );

      // SIGSTOP the new leader past its TTL, then SIGCONT.
      const second = byReplica(takeover.state.leader);
      const secondEpoch = takeover.state.epoch;
      const beforePause = await stateOf(second);
      const rejectedBefore = Object.values(
        beforePause.local.fenced_writes.stale_writes_rejected,
      ).reduce((a, b) => a + b, 0);
      down.add(second);
      process.kill(second.pid, 'SIGSTOP');
      const stoppedAt = performance.now();
      const third = await waitForState((s) => s.leader !== null && s.epoch > secondEpoch, 10_000);
      console.log(
        `SIGSTOP ${replicaOf(second)} (epoch ${secondEpoch}) -> ${third.state.leader} leads in epoch ${third.state.epoch} after ${(third.at - stoppedAt).toFixed(0)} ms`,
      );
      await sleep(Math.max(0, 4_000 - (performance.now() - stoppedAt)));
      process.kill(second.pid, 'SIGCONT');
      down.delete(second);
      const resumed = await (async () => {
        for (;;) {
          const state = await stateOf(second);
          const rejected = Object.values(state.local.fenced_writes.stale_writes_rejected).reduce(
            (a, b) => a + b,
            0,
          );
          if (rejected > rejectedBefore) return state;
          await sleep(100);
        }
      })();
      console.log(
        `SIGCONT ${replicaOf(second)}: stale writes rejected ${JSON.stringify(resumed.local.fenced_writes.stale_writes_rejected)}, dropped ticks ${resumed.local.fenced_writes.dropped_ticks}`,
      );
      expect(resumed.is_leader).toBe(false);
      expect(
        resumed.local.fenced_writes.accepted_writes_by_epoch[String(third.state.epoch)],
      ).toBeUndefined();
      // The paused leader writes nothing after waking: the stored state keeps coming from the third epoch.
      await sleep(1_500);
      for (const gateway of live()) {
        const state = await stateOf(gateway);
        expect(state.controller.written_by?.epoch).toBe(third.state.epoch);
      }
      const metrics = await (await fetch(`${second.url}/metrics`)).text();
      expect(metrics).toMatch(/fairgate_stale_fenced_writes_total\{[^}]*\} [1-9]/);
      expect(metrics).toMatch(/fairgate_is_leader\{[^}]*\} 0/);
    } finally {
      control.stop = true;
      await load.done;
    }

    // No two replicas ever had writes accepted in the same epoch.
    const owners = new Map<number, string[]>();
    for (const [replica, byEpoch] of accepted) {
      for (const [epoch, count] of byEpoch) {
        if (count > 0) owners.set(epoch, [...(owners.get(epoch) ?? []), replica]);
      }
    }
    console.log(
      `accepted writes by epoch: ${JSON.stringify([...owners])}; writers ${JSON.stringify([...writers].map(([e, r]) => [e, [...r]]))}`,
    );
    expect(owners.size).toBeGreaterThanOrEqual(3);
    for (const [, replicas] of owners) expect(replicas).toHaveLength(1);
    for (const [, replicas] of writers) expect(replicas.size).toBe(1);
    expect(load.counters.completed).toBeGreaterThan(100);
  }, 60_000);
});
