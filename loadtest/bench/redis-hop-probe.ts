/**
 * The machine's floor for bench:waiting's next grant: how long one hop through Redis takes
 * a process on this machine, measured beside the replica while it drains.
 *
 * A grant is at least one trip through Redis. The probe is a child process doing only that,
 * at the drain's pace, one write every period, the two kinds of trip in turn, each timed
 * from just before its write:
 *
 * - the round trip: an INCR, until its reply arrives on the same connection. That is the
 *   path of a grant a release carries back in its reply (the replica's own next waiting
 *   request: a queue draining on one replica, as in bench:waiting);
 * - the hop: an LPUSH of a sequence number, until a BLMPOP on another connection returns
 *   it. That is the path of a grant made by another replica's pass, which reaches the
 *   replica's blocking wait.
 *
 * In turn, not from one write: the LPUSH's reply and the BLMPOP's arrive together, and
 * whichever the probe reads second would carry the reading of the first.
 *
 * The process is otherwise idle, so what it measures is the machine: Redis's and the
 * probe's wake-ups and the cores they wait for while the replica, Redis and the load share
 * them. A next-grant p99 near the floor's p99 is as low as the replica can go on this
 * machine; the gap above it is the replica's own.
 *
 * The probe adds one write per period to Redis's work, and a BLMPOP every other period
 * (~1-2% of what the drain's Lua calls cost it). Every loop is bounded: it stops on `stop()`
 * or when its parent goes.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';

const CHILD_FLAG = '--redis-hop-probe';

/** Milliseconds since `record`, in the order measured (each kind every other period). */
export interface HopReadings {
  /** An INCR until its reply on the same connection. */
  roundTrips: number[];
  /** An LPUSH until the BLMPOP on the other connection returned the pushed number. */
  hops: number[];
}

export interface RedisHopProbe {
  readonly pid: number;
  /** Forgets the readings so far (the warm-up): what `stop` returns starts here. */
  record(): void;
  /** Stops the probe; the readings since `record`. */
  stop(): Promise<HopReadings>;
}

type ToChild = { record: true } | { stop: true };
type FromChild = { ready: true } | { readings: HopReadings };

/** Starts the probe against `redisUrl`, one write every `periodMs`. */
export async function startRedisHopProbe(
  redisUrl: string,
  periodMs: number,
): Promise<RedisHopProbe> {
  const child = fork(fileURLToPath(import.meta.url), [CHILD_FLAG, redisUrl, String(periodMs)], {
    // This file is TypeScript, whoever starts it (a bench under tsx, a vitest worker).
    execArgv: ['--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  await nextMessage(child, (m): m is { ready: true } => 'ready' in m, 15_000);
  const pid = child.pid;
  if (pid === undefined) throw new Error('redis hop probe: no pid');
  return {
    pid,
    record: () => {
      if (child.connected) child.send({ record: true } satisfies ToChild);
    },
    stop: async () => {
      if (!child.connected) throw new Error('redis hop probe: gone before stop');
      child.send({ stop: true } satisfies ToChild);
      const { readings } = await nextMessage(
        child,
        (m): m is { readings: HopReadings } => 'readings' in m,
        15_000,
      );
      child.disconnect();
      return readings;
    },
  };
}

function nextMessage<T extends FromChild>(
  child: ChildProcess,
  is: (message: FromChild) => message is T,
  timeoutMs: number,
): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill();
      reject(new Error(`redis hop probe: no answer within ${timeoutMs} ms`));
    }, timeoutMs);
    const onExit = (code: number | null) => {
      clearTimeout(timer);
      reject(new Error(`redis hop probe exited (${code})`));
    };
    const onMessage = (message: FromChild) => {
      if (!is(message)) return;
      clearTimeout(timer);
      child.off('message', onMessage);
      child.off('exit', onExit);
      resolve(message);
    };
    child.on('message', onMessage);
    child.once('exit', onExit);
  });
}

/**
 * The child: a write every period (an LPUSH for the hop, an INCR for the round trip, in
 * turn) until told to stop.
 */
async function runProbe(redisUrl: string, periodMs: number): Promise<void> {
  const send = (message: FromChild) => process.send?.(message);
  const writer = new Redis(redisUrl, { maxRetriesPerRequest: 1 });
  const reader = writer.duplicate();
  const key = `fairgate:bench:hop-probe:${process.pid}`;
  const counter = `${key}:round-trips`;
  await Promise.all([writer.del(key, counter), reader.ping()]);
  const sentAt = new Map<number, number>();
  const pending = new Set<Promise<unknown>>(); // round trips not yet answered
  let readings: HopReadings = { roundTrips: [], hops: [] };
  let stopping = false;

  const receiving = (async () => {
    // Stopping: until every sent number is back, or a wait of 1 s brought none (one lost).
    while (!stopping || sentAt.size > 0) {
      const reply = (await reader.call('BLMPOP', 1, 1, key, 'LEFT', 'COUNT', 64)) as
        | [string, string[]]
        | null;
      const now = performance.now();
      if (reply === null && stopping) break;
      for (const seq of reply?.[1] ?? []) {
        const at = sentAt.get(Number(seq));
        sentAt.delete(Number(seq));
        if (at !== undefined) readings.hops.push(now - at);
      }
    }
  })();

  let seq = 0;
  let ticks = 0;
  const timer = setInterval(() => {
    if (sentAt.size + pending.size > 1_000) return; // Redis stalled: do not pile up
    if (ticks++ % 2 === 0) {
      sentAt.set(seq, performance.now());
      void writer.lpush(key, String(seq++)).catch(() => {}); // lost: a hop that never came
      return;
    }
    const at = performance.now();
    const trip = writer.incr(counter).then(
      () => readings.roundTrips.push(performance.now() - at),
      () => {},
    );
    pending.add(trip);
    void trip.finally(() => pending.delete(trip));
  }, periodMs);

  process.on('message', (message: ToChild) => {
    if ('record' in message) readings = { roundTrips: [], hops: [] };
    if ('stop' in message) {
      stopping = true;
      clearInterval(timer);
      void Promise.all([receiving, ...pending]).then(async () => {
        await writer.del(key, counter);
        send({ readings });
        writer.disconnect();
        reader.disconnect();
      });
    }
  });
  process.once('disconnect', () => process.exit(0));
  send({ ready: true });
}

if (process.argv[2] === CHILD_FLAG) {
  await runProbe(process.argv[3] ?? '', Number(process.argv[4]));
}
