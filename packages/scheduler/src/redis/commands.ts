import { Cluster, Command, type Redis, ReplyError } from 'ioredis';
import { library, type ScriptName, scripts } from '../generated/scripts.js';
import { markUrgent, type RedisConnection } from './connection.js';

export type ScriptArg = string | number;
export type RunScript = (
  name: ScriptName,
  keys: readonly string[],
  args: readonly ScriptArg[],
  /** Leaves at once even while the connection holds a turn's writes (markUrgent). */
  urgent?: boolean,
) => Promise<unknown>;

/**
 * Runs the scheduler's scripts as functions of one Redis function library (FCALL). The
 * library's name carries the package version (scripts/build-lua.mjs), so two releases
 * sharing one Redis during a rolling deploy each run their own functions; every replica of
 * one release loads the same code, so FUNCTION LOAD REPLACE is idempotent.
 *
 * The library is loaded when a call finds its function missing: on first use, after a
 * restart without persistence or a FUNCTION FLUSH, on a replica promoted before the library
 * reached it. The refused call loads it and is retried once, so the loss is invisible to
 * callers (as ioredis hides NOSCRIPT for EVALSHA). That refusal is recognised by Redis's
 * reply text, the one place this package reads one: Redis gives it no error code of its own
 * ("ERR Function not found"; test/redis.test.ts and test/cluster.test.ts flush the
 * functions under load). The scripts themselves never fail by error: they return negative
 * codes (src/codes.ts).
 *
 * The calls keep their order through a load: once it ends, the refused calls are sent
 * again and the calls made meanwhile are sent, all in the order they were made, so Redis
 * runs this replica's calls in its order. EngineBatch promises that order, and slot
 * recycling needs it: a handover registers a running request, whose release may be made
 * before the handover's reply (test/redis.test.ts, *a release made while the library
 * loads*).
 *
 * On a Cluster, FCALL is routed by its keys like any keyed command (@ioredis/commands knows
 * FCALL's key positions), and every key of one call carries the pool's hash tag, so a call
 * runs whole on the master of the pool's slot. Functions are per server, not per slot, so
 * the library is loaded on every master the client knows; replicas get it through
 * replication.
 */
export function functionRunner(connection: RedisConnection): RunScript {
  // Calls are numbered in the order they are made, loads in the order they start. A load
  // numbered above what a call saw when it was sent was itself sent after that call failed,
  // on the same per-server connection, so it runs after the loss and the call can wait for
  // it instead of loading again: a flush under N concurrent calls costs one load, not N.
  let made = 0;
  let started = 0;
  let loading: Load | undefined;

  const load = (): Load => {
    started += 1;
    const current: Load = { number: started, after: [] };
    loading = current;
    const finish = (outcome: LoadOutcome) => {
      if (loading === current) loading = undefined;
      // In the order the calls were made (the retries of the calls the loss refused, then
      // the calls made meanwhile), each written before the next.
      current.after.sort((a, b) => a.place - b.place);
      for (const call of current.after) call.resume(outcome);
    };
    loadEverywhere(connection).then(
      () => finish(LOADED),
      (error: unknown) => finish({ error }),
    );
    return current;
  };

  return (name, keys, args, urgent = false) => {
    const script = scripts[name];
    if (keys.length !== script.keys) {
      return Promise.reject(
        new Error(`script ${name} takes ${script.keys} keys, got ${keys.length}`),
      );
    }
    const fcall = () => {
      const command = new Command(
        'FCALL',
        flatArgs([script.function, script.keys, ...keys, ...args]),
        { keyPrefix: connection.options.keyPrefix, replyEncoding: 'utf8' },
      );
      return connection.sendCommand(urgent ? markUrgent(command) : command) as Promise<unknown>;
    };
    const place = ++made;
    // Sent now; when refused for the missing library, sent again once, after the load.
    const attempt = (): Promise<unknown> => {
      const seen = started;
      return fcall().catch((error: unknown) => {
        if (!isMissingFunction(error)) throw error;
        const current = loading && loading.number > seen ? loading : load();
        return after(current, place, (outcome) =>
          outcome === LOADED ? fcall() : Promise.reject(outcome.error),
        );
      });
    };
    // A call made while a load runs waits for it: sent at once, it would reach Redis before
    // the retries of calls made earlier (a release before the handover that registers its
    // request, which would then hold its slot until its lease expired).
    return loading ? after(loading, place, attempt) : attempt();
  };
}

/** How a FUNCTION LOAD ended: loaded, or the error of the calls it would have retried. */
type LoadOutcome = typeof LOADED | { error: unknown };
const LOADED = Symbol('loaded');

/** A FUNCTION LOAD in flight, and the calls that go to Redis once it ends. */
interface Load {
  readonly number: number;
  readonly after: Array<{ place: number; resume(outcome: LoadOutcome): void }>;
}

/** Runs `send` once `current` ends, in the order of `place` among the calls it holds. */
function after(
  current: Load,
  place: number,
  send: (outcome: LoadOutcome) => Promise<unknown>,
): Promise<unknown> {
  return new Promise((resolve, reject) => {
    current.after.push({ place, resume: (outcome) => send(outcome).then(resolve, reject) });
  });
}

/**
 * An FCALL's arguments, marked flat. ioredis's Command flattens what it is given one level
 * (`args.flat()`: node_redis's old convention of arrays as arguments), as `connection.call`
 * would here; these are strings and numbers already, so flattening is the identity, and on
 * Node 20 (V8 11) Array.prototype.flat costs ~180 ns per element: ~2.7 us of an enqueue's
 * 15 arguments, ~2% of the gateway's CPU per request. The array's own `flat` returns it.
 */
function flatArgs(args: ScriptArg[]): ScriptArg[] {
  // An assignment, not Object.defineProperty (a runtime call, 3x the cost).
  (args as unknown as { flat: unknown }).flat = alreadyFlat;
  return args;
}

function alreadyFlat<T>(this: T): T {
  return this;
}

/**
 * FUNCTION LOAD REPLACE on the one server, or on every master of a Cluster. A master that
 * cannot be reached is skipped: its own calls will find the library missing and load again.
 * Fails only when no server took the library.
 */
async function loadEverywhere(connection: RedisConnection): Promise<void> {
  const targets: Redis[] =
    connection instanceof Cluster ? connection.nodes('master') : [connection];
  if (targets.length === 0)
    throw new Error('no Redis master known to load the function library on');
  const results = await Promise.allSettled(
    targets.map((target) => target.call('FUNCTION', 'LOAD', 'REPLACE', library.content)),
  );
  if (results.some((result) => result.status === 'fulfilled')) return;
  throw (results[0] as PromiseRejectedResult).reason;
}

function isMissingFunction(error: unknown): boolean {
  return error instanceof ReplyError && /function not found/i.test((error as Error).message);
}
