import { ReplyError } from 'ioredis';
import type { RunScript, ScriptArg } from './commands.js';

/** The engine calls lua/batch-1.lua runs (its `batchable` table; test/scripts.test.ts). */
export const ENGINE_CALLS = [
  'enqueue',
  'poll',
  'release',
  'handover',
  'heartbeat',
  'reclaim',
] as const;
export type EngineCall = (typeof ENGINE_CALLS)[number];

/**
 * The calls a request waits on before it can go on: an enqueue's reply is its grant, the
 * forward to a pod hangs on it. They leave at once, alone (markUrgent); the others (a
 * release once the answer is out, the tick's poll, heartbeats, reclaims) are bookkeeping
 * that can ride with their turn's batch.
 */
const URGENT_CALLS: ReadonlySet<EngineCall> = new Set(['enqueue']);

/**
 * Calls no request waits on at all: a handover's request already runs on its pod (slot
 * recycling). One opens a batch that waits LAZY_MS for company instead of leaving at the
 * check phase, so a busy replica sends several a write: each write to Redis costs the
 * gateway a cross-process wake-up (~50-100 us of its CPU on 2-core VMs, mostly
 * `writev`), more than the call itself. A call that is not lazy joining such a batch makes
 * it leave at the check phase, as any batch does.
 */
const LAZY_CALLS: ReadonlySet<EngineCall> = new Set(['handover']);
const LAZY_MS = 1;

/** Most calls in one batch FCALL: bounds the time one script holds Redis. */
const MAX_BATCH_CALLS = 64;

interface Pending {
  name: EngineCall;
  args: ScriptArg[];
  resolve(reply: unknown): void;
  reject(error: unknown): void;
}

/**
 * A replica's engine calls, several in one FCALL when the connection is busy. A call made
 * while none of this pool's calls await a reply is sent at once, alone, as before (a lone
 * request's enqueue is not held back). A call made while others await their replies joins a
 * batch that leaves at the check phase (setImmediate) as one `batch` FCALL (lua/batch-1.lua):
 * under load the releases of the requests one poll phase read, ~3 per turn at c=16, become
 * one command for ioredis to build, send, time and parse and for Redis to parse and
 * dispatch, instead of one per call. The commands of a turn already shared a socket write
 * (coalesceWrites in connection.ts), so the batch leaves when they did.
 *
 * An urgent call (URGENT_CALLS: an enqueue) never waits for the check phase: it sends the
 * open batch first, then itself, alone, and both leave at once in one write. Batched, an
 * enqueue's reply came a whole event-loop turn later under load (bench:overhead, 2-core VM:
 * sent at once, plain c=16 through Redis makes 1.16x the req/s).
 *
 * Each call keeps its own reply, and its own error: a call that raised one in Redis rejects
 * with a ReplyError of that message, as its own FCALL would. A batch that fails whole (the
 * connection lost, the command timed out) rejects each of its calls with that error. The
 * calls run in the order they were made, and a call made while a batch is open joins it, so
 * this replica's engine calls reach Redis in the order it made them.
 */
export class EngineBatch {
  #open: Pending[] | undefined;
  /** Set while the open batch holds only lazy calls: when it leaves unless joined. */
  #lazyTimer: NodeJS.Timeout | undefined;
  /** Engine FCALLs (single or batch) sent and not yet answered. */
  #awaiting = 0;

  constructor(
    private readonly run: RunScript,
    private readonly keys: readonly string[],
  ) {}

  call(name: EngineCall, args: ScriptArg[]): Promise<unknown> {
    if (URGENT_CALLS.has(name)) {
      this.#flush();
      return this.#send(name, args, true);
    }
    const lazy = LAZY_CALLS.has(name);
    if (!lazy && !this.#open && this.#awaiting === 0) return this.#send(name, args);
    return new Promise((resolve, reject) => {
      if (!this.#open) {
        this.#open = [];
        if (lazy) this.#lazyTimer = setTimeout(() => this.#flush(), LAZY_MS);
        else setImmediate(() => this.#flush());
      } else if (!lazy && this.#lazyTimer) {
        clearTimeout(this.#lazyTimer);
        this.#lazyTimer = undefined;
        setImmediate(() => this.#flush());
      }
      this.#open.push({ name, args, resolve, reject });
      if (this.#open.length >= MAX_BATCH_CALLS) this.#flush();
    });
  }

  async #send(name: EngineCall | 'batch', args: ScriptArg[], urgent = false): Promise<unknown> {
    this.#awaiting += 1;
    try {
      return await this.run(name, this.keys, args, urgent);
    } finally {
      this.#awaiting -= 1;
    }
  }

  #flush(): void {
    const calls = this.#open;
    this.#open = undefined;
    if (this.#lazyTimer) {
      clearTimeout(this.#lazyTimer);
      this.#lazyTimer = undefined;
    }
    if (!calls || calls.length === 0) return;
    if (calls.length === 1) {
      const only = calls[0]!;
      this.#send(only.name, only.args).then(only.resolve, only.reject);
      return;
    }
    const args: ScriptArg[] = [];
    for (const call of calls) {
      args.push(call.name, call.args.length);
      for (const arg of call.args) args.push(arg);
    }
    this.#send('batch', args).then(
      (reply) => answer(calls, reply),
      (error) => {
        for (const call of calls) call.reject(error);
      },
    );
  }
}

/** Hands each call of a batch its own reply ({1, reply}) or error ({0, message}). */
function answer(calls: Pending[], reply: unknown): void {
  const replies = Array.isArray(reply) ? reply : [];
  for (let i = 0; i < calls.length; i++) {
    const call = calls[i]!;
    const item = replies[i] as [number, unknown?] | undefined;
    if (!Array.isArray(item)) {
      call.reject(new Error(`batch answered ${replies.length} replies for ${calls.length} calls`));
    } else if (item[0] === 1) {
      call.resolve(item[1] ?? null);
    } else {
      call.reject(new ReplyError(String(item[1])));
    }
  }
}
