import { LocalScheduler, RedisScheduler, type Scheduler } from '@fairgate/scheduler';
import { type RedisHandle, startRedis } from '@fairgate/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LeaderElection } from '../src/control/election.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Blocks this process's event loop, like a GC pause or SIGSTOP would. */
function pauseProcess(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

async function until(what: string, probe: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!probe()) {
    if (performance.now() > deadline) throw new Error(`${what}: not after ${timeoutMs} ms`);
    await sleep(5);
  }
}

interface Tracked {
  election: LeaderElection;
  elected: number[];
  deposed: string[];
  staleRenewals: number;
}

/**
 * The election loop against both real stores: LocalScheduler (every replica of a process
 * shares it) and RedisScheduler (one connection per replica, like separate processes).
 */
describe.each(['local', 'redis'] as const)('LeaderElection on the %s scheduler', (kind) => {
  let redis: RedisHandle | undefined;
  let pool = 0;
  const opened: Scheduler[] = [];

  beforeAll(async () => {
    if (kind === 'redis') redis = await startRedis();
  });
  afterAll(async () => {
    await Promise.all(opened.map((s) => s.close()));
    await redis?.stop();
  });

  /** Handles on one fresh pool: the same LocalScheduler, or a connection each on Redis. */
  function freshPool(): () => Scheduler {
    pool += 1;
    const local = new LocalScheduler();
    const name = `election${pool}`;
    return () => {
      const scheduler = redis ? new RedisScheduler({ pool: name, connection: redis.url }) : local;
      opened.push(scheduler);
      return scheduler;
    };
  }

  function track(store: Scheduler, replica: string, leaseTtlMs: number, renewMs: number): Tracked {
    const seen = { elected: [] as number[], deposed: [] as string[], staleRenewals: 0 };
    const election = new LeaderElection({
      store,
      replica,
      leaseTtlMs,
      renewMs,
      onElected: (fence) => seen.elected.push(fence.epoch),
      onDeposed: (_fence, reason) => seen.deposed.push(reason),
      onStaleRenewal: () => {
        seen.staleRenewals += 1;
      },
    });
    return Object.assign(seen, { election });
  }

  it('exactly one of three leads and keeps its epoch; stop() hands over before the lease lapses', async () => {
    const connect = freshPool();
    const replicas = ['ra', 'rb', 'rc'].map((r) => track(connect(), r, 2_000, 50));
    for (const r of replicas) r.election.start();
    const leaders = () => replicas.filter((r) => r.election.fence !== null);
    await until('a leader', () => leaders().length === 1);
    await sleep(300); // several renewals
    expect(leaders()).toHaveLength(1);
    const first = leaders()[0] as Tracked;
    expect(first.elected).toEqual([1]);
    expect(first.election.fence?.epoch).toBe(1);

    const handoverStarted = performance.now();
    await first.election.stop();
    expect(first.deposed).toEqual(['shutting down']);
    expect(first.election.fence).toBeNull();
    await until('a new leader', () => leaders().length === 1);
    // Released, not lapsed: the next leader did not wait out the 2 s lease.
    expect(performance.now() - handoverStarted).toBeLessThan(2_000);
    const second = leaders()[0] as Tracked;
    expect(second.election.fence?.epoch).toBe(2);
    for (const r of replicas) await r.election.stop();
  });

  it("a follower takes a crashed leader's lease as soon as it lapses, not a period later", async () => {
    const connect = freshPool();
    const store = connect();
    // A leader that will never renew (killed right after acquiring).
    expect(await store.acquireLeadership('crashed', 400)).toEqual({ leader: true, epoch: 1 });
    const follower = track(connect(), 'rb', 1_000, 60_000);
    const startedAt = performance.now();
    follower.election.start();
    await until('the follower leads', () => follower.election.fence !== null);
    // Its retry period is a minute: only the lease's remaining time can explain this.
    expect(performance.now() - startedAt).toBeLessThan(10_000);
    expect(follower.elected).toEqual([2]);
    await follower.election.stop();
  });

  it('a paused leader wakes without a live fence, its renewal is refused and counted, and it follows', async () => {
    const connect = freshPool();
    const store = connect();
    const leader = track(store, 'ra', 300, 100);
    leader.election.start();
    await until('ra leads', () => leader.election.fence !== null);
    const fence = leader.election.fence;
    expect(fence?.epoch).toBe(1);

    pauseProcess(600); // past the 300 ms lease
    // Awake, before any timer ran: the local view already knows the lease may be gone.
    expect(leader.election.fence).toBeNull();
    expect(leader.election.holds(fence!)).toBe(false);
    // Another replica takes the lapsed lease first (same connection: issued first, served first).
    const intruder = store.acquireLeadership('intruder', 60_000);
    await until('ra is deposed', () => leader.deposed.length > 0);
    expect(await intruder).toEqual({ leader: true, epoch: 2 });
    expect(leader.staleRenewals).toBe(1);
    expect(leader.deposed[0]).toMatch(/renewal refused/);
    await sleep(300);
    expect(leader.election.fence).toBeNull();
    expect(leader.elected).toEqual([1]);
    expect(await store.renewLeadership(fence!, 1_000)).toBe(false);
    await leader.election.stop();
    expect((await store.snapshot()).leader).toBe('intruder');
  });

  it.runIf(kind === 'redis')(
    'after Redis lost its data, the next leadership is above every epoch seen before',
    async () => {
      const connect = freshPool();
      const store = connect();
      // Epochs 1..3 went to others before ra leads.
      for (const r of ['x1', 'x2', 'x3']) {
        const won = await store.acquireLeadership(r, 60_000);
        if (won.leader) await store.releaseLeadership({ replica: r, epoch: won.epoch });
      }
      const leader = track(connect(), 'ra', 400, 100);
      leader.election.start();
      await until('ra leads', () => leader.election.fence !== null);
      const before = leader.election.fence!;
      expect(before.epoch).toBe(4);

      const admin = new Redis(redis!.url);
      await admin.flushall(); // the lease and the epoch counter are gone
      admin.disconnect();
      await until('ra leads again', () => leader.elected.length === 2, 5_000);
      expect(leader.deposed[0]).toMatch(/renewal refused/);
      expect(leader.elected[1]).toBeGreaterThan(before.epoch);
      // A write fenced by the pre-loss leadership is refused.
      expect(await store.setControl(before, { budget: 7 })).toBe(false);
      await leader.election.stop();
    },
  );
});
