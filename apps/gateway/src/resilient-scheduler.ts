import { type Scheduler, SchedulerError, ScriptCode } from '@fairgate/scheduler';
import { isUnavailable, type OutageMonitor, SchedulerUnavailable } from './redis-outage.js';

export interface ResilientSchedulerOptions {
  monitor: OutageMonitor;
  /**
   * Writes the pool's shared state again from this replica's config (settings in seed mode,
   * tenants, pods) and re-registers what this replica holds. Called on the inner scheduler,
   * never through the wrapper.
   */
  reseed: () => Promise<void>;
  onReseeded?: () => void;
  onReseedFailed?: (error: unknown) => void;
  /**
   * The timer of one operation's calls (fairgate_redis_call_seconds), asked once per
   * operation: every call that reaches Redis is observed, failed ones included, retry after
   * a reseed included. The blocking waitForNotices is not timed (it waits on purpose).
   */
  callTimer?: (operation: string) => { observe(seconds: number): void };
}

/**
 * Script codes that mean the pool's shared state is missing (Redis restarted empty, was
 * flushed, or failed over to a replica that never had it), not that the call was wrong.
 */
const STATE_MISSING = new Set<number>([ScriptCode.NotConfigured, ScriptCode.UnknownTenant]);

/**
 * Calls that end a request: kept and sent again when Redis is back, so no lease leaks. (Not
 * a handover: sent again later, it could register a request that has ended meanwhile; the
 * recycler releases and readopts instead, slot/slot-recycler.ts.)
 */
const ENDING = new Set<keyof Scheduler>(['release', 'cancel']);

/** Calls that block until something happens: their time is not a Redis latency. */
const UNTIMED = new Set<keyof Scheduler>(['waitForNotices']);

/** Most ending calls kept during one outage (older ones are dropped; leases then expire). */
const MAX_DEFERRED = 100_000;

const METHODS = [
  'configure',
  'upsertTenants',
  'upsertPods',
  'syncPods',
  'setPodHealth',
  'meterUsage',
  'readUsage',
  'forgetPrefixes',
  'reportPodAdapters',
  'dropPodAdapter',
  'enqueue',
  'poll',
  'waitForNotices',
  'cancel',
  'release',
  'handover',
  'heartbeat',
  'reclaim',
  'snapshot',
  'acquireLeadership',
  'renewLeadership',
  'releaseLeadership',
  'setControl',
  'takeInflightPeak',
  'reportPodLoad',
  'setLeaderData',
  'getLeaderData',
  'flushLatency',
  'readLatencyWindow',
] as const satisfies ReadonlyArray<Exclude<keyof Scheduler, 'close'>>;

type Method = (typeof METHODS)[number];

/**
 * The Redis scheduler as the gateway uses it: every call either succeeds, or fails as
 * SchedulerUnavailable within the connection's command timeout, or fails as the inner
 * scheduler says (a bad call). Around each call:
 * - the pool's shared state missing -> reseed once (single flight for all callers), retry once;
 * - Redis unreachable -> the outage monitor hears of it, and the caller gets SchedulerUnavailable;
 * - during an outage, enqueue fails at once without a Redis call (the request path answers
 *   503 or goes to the local share at once);
 * - release/cancel that could not be sent are sent again when Redis is back, and wait for a
 *   running reseed (which may be registering the very request again).
 */
export function resilientScheduler(
  inner: Scheduler,
  options: ResilientSchedulerOptions,
): Scheduler {
  const { monitor } = options;
  let reseeding: Promise<void> | undefined;
  const deferred: Array<() => Promise<unknown>> = [];

  const reseed = (): Promise<void> => {
    reseeding ??= options.reseed().then(
      () => {
        reseeding = undefined;
        options.onReseeded?.();
      },
      (error: unknown) => {
        reseeding = undefined;
        options.onReseedFailed?.(error);
        throw error;
      },
    );
    return reseeding;
  };

  const flushDeferred = () => {
    for (const call of deferred.splice(0)) void call().catch(() => {});
  };

  /** One operation with the reseed, outage and deferral handling above. */
  const resilient = (name: Method) => {
    const method = inner[name] as (...args: unknown[]) => Promise<unknown>;
    const call = (args: unknown[]) => method.apply(inner, args);
    const ending = ENDING.has(name);
    return async (...args: unknown[]): Promise<unknown> => {
      if (name === 'enqueue' && monitor.down) {
        throw new SchedulerUnavailable('enqueue', undefined, false);
      }
      // A request readopted by a running reseed must be registered before it is released.
      if (reseeding && ending) await reseeding.catch(() => {});
      try {
        const result = await call(args);
        if (monitor.down) {
          monitor.reachable();
          flushDeferred();
        }
        return result;
      } catch (error) {
        if (error instanceof SchedulerError && STATE_MISSING.has(error.code)) {
          await reseed().catch((reseedError: unknown) => {
            throw isUnavailable(reseedError) ? unavailable(name, reseedError) : error;
          });
          return call(args).catch((retryError: unknown) => {
            throw isUnavailable(retryError) ? unavailable(name, retryError) : retryError;
          });
        }
        if (!isUnavailable(error)) throw error;
        if (ending && deferred.length < MAX_DEFERRED) deferred.push(() => call(args));
        throw unavailable(name, error);
      }
    };
  };

  /** The resilient operation, timed when a call timer is given. */
  const wrap = (name: Method) => {
    const guarded = resilient(name);
    const timer = UNTIMED.has(name) ? undefined : options.callTimer?.(name);
    if (!timer) return guarded;
    return async (...args: unknown[]): Promise<unknown> => {
      // During an outage enqueue fails without a Redis call: nothing to time.
      if (name === 'enqueue' && monitor.down) return guarded(...args);
      const started = performance.now();
      try {
        return await guarded(...args);
      } finally {
        timer.observe((performance.now() - started) / 1_000);
      }
    };
  };

  const unavailable = (name: string, error: unknown) => {
    monitor.unreachable(`${name}: ${error instanceof Error ? error.message : String(error)}`);
    return error instanceof SchedulerUnavailable ? error : new SchedulerUnavailable(name, error);
  };

  const wrapped = Object.fromEntries(METHODS.map((name) => [name, wrap(name)])) as Pick<
    Scheduler,
    Method
  >;
  return { ...wrapped, close: () => inner.close() };
}
