import { sha256Hex, TEST_KEYS } from '@fairgate/testkit';
import { type GenerateResult, generate, type PoolOptions, sleep } from '../support/pool.js';

/**
 * The pool every chaos test starts from: 2 replicas, one fast pod (alpha 10 ms), budget 16,
 * one tenant `paying`, Redis calls timing out after 250 ms; `overrides` replace top-level
 * options (scheduler, redis, redisSection...).
 */
/**
 * How long after Redis dies a request may still be served on a slot Redis granted before:
 * slot recycling hands a completed request's slot to the replica's next request with no
 * Redis call, until the replica sees its connection close (the next event-loop turn that
 * reads the socket, longer on a loaded machine) or a call fail (docs/scheduler.md, *Slot
 * recycling*). Requests sent within it may be answered 200 where the outage's answer is
 * asked for; every later one must get it.
 */
export const RECYCLED_AFTER_KILL_MS = 100;

export function chaosPool(overrides: Partial<PoolOptions> = {}): PoolOptions {
  return {
    replicas: 2,
    sims: [{ 'alpha-ms': 10 }],
    budget: 16,
    tenants: [
      { id: 'paying', api_key_sha256: [sha256Hex(TEST_KEYS.paying)], weight: 1, queue_max: 100 },
    ],
    redis: { on_outage: 'reject', command_timeout_ms: 250 },
    ...overrides,
  };
}

/** One finished request of a steady load: when it was sent and how it ended. */
export interface LoadRecord extends GenerateResult {
  replica: number;
}

export interface SteadyLoad {
  /** Every request ended so far (all of them once `done` resolved). */
  readonly records: LoadRecord[];
  /** Resolves when every worker stopped (after stop() or the time limit). */
  readonly done: Promise<LoadRecord[]>;
  stop(): void;
}

export interface SteadyLoadOptions {
  /** Gateway URLs; worker i sends to urls[i % urls.length]. */
  urls: string[];
  concurrency: number;
  /** Hard limit of the whole load (it stops by itself). */
  maxMs: number;
  /** Client timeout of one request: a request still open then counts as hung (status -1). */
  requestTimeoutMs: number;
  apiKey?: string;
  /** Pause after a non-200 answer, as a client honouring Retry-After briefly would. */
  backoffMs?: number;
}

/**
 * Closed-loop clients through real HTTP: each worker sends, waits for the whole answer,
 * sends again. Bounded in time (maxMs) and per request (requestTimeoutMs).
 */
export function steadyLoad(options: SteadyLoadOptions): SteadyLoad {
  const records: LoadRecord[] = [];
  const started = performance.now();
  let stopped = false;
  const worker = async (index: number) => {
    const replica = index % options.urls.length;
    const url = options.urls[replica] as string;
    while (!stopped && performance.now() - started < options.maxMs) {
      const result = await generate(url, options.apiKey ?? TEST_KEYS.paying, {
        signal: AbortSignal.timeout(options.requestTimeoutMs),
      });
      records.push({ ...result, replica });
      if (result.status !== 200) await sleep(options.backoffMs ?? 20);
    }
  };
  const done = Promise.all(Array.from({ length: options.concurrency }, (_, i) => worker(i))).then(
    () => records,
  );
  return {
    records,
    done,
    stop() {
      stopped = true;
    },
  };
}

/** Records sent in [from, to) (performance.now() times). */
export function sentBetween(records: readonly LoadRecord[], from: number, to: number) {
  return records.filter((r) => r.sentAt >= from && r.sentAt < to);
}

/** `{200: n, 503: m, ...}` with the hung ones (client timeout) as -1. */
export function statuses(records: readonly LoadRecord[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of records) out[r.status] = (out[r.status] ?? 0) + 1;
  return out;
}
