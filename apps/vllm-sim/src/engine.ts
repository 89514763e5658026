import { kvBlocksFor } from '@fairgate/openai';
import { type KvBlock, KvBlockPool } from './kv.js';
import { AdapterCache } from './lora-cache.js';

/**
 * The engine: vLLM-style continuous batching on the queueing model, as a pure state machine.
 * Time is always passed in (milliseconds); nothing here reads a clock or sets a timer, so
 * tests drive it deterministically and the real-time loop lives in driver.ts.
 *
 * One iteration (a forward pass over the batch) takes
 *   alpha + sum over the batch of the work of each sequence, where a sequence
 *   - in prefill costs (beta + gamma) * (its uncached prompt tokens), and emits its first token;
 *   - at decode step k (k tokens generated so far) costs beta + gamma * (prompt + k) and
 *     emits one more token.
 * So a lone request with i prompt tokens sees TTFT = alpha + (beta+gamma)*i and then one
 * token every alpha + beta + gamma*(i+k).
 *
 * Scheduling follows vLLM V1's FCFS policy:
 * - at most maxNumSeqs sequences run; the rest wait in a FIFO queue (new arrivals beyond
 *   maxWaiting are refused; preempted sequences always go back in);
 * - a running sequence holds kvBlocksFor(prompt + generated) blocks; when a step needs a
 *   block and none is free, the newest running sequence is preempted: its blocks are freed
 *   and it goes back to the head of the queue, to recompute prompt + generated tokens as one
 *   prefill when re-admitted (the tokens it already emitted are not emitted again);
 * - waiting sequences are admitted in order (no overtaking) while a seat and enough free
 *   blocks for their prompt exist, and only in a step without preemption;
 * - prompt blocks found in the prefix cache are neither recomputed nor re-allocated;
 * - LoRA (maxLoras > 0): a batch holds at most maxLoras distinct adapters; a waiting
 *   sequence whose adapter would exceed that is skipped, keeping its place, and the next
 *   one is considered (vLLM's scheduler does the same). Adapters live in an LRU cache of
 *   maxCpuLoras; an iteration whose batch needs one not in it costs loraLoadMs more per
 *   adapter loaded.
 */
export interface EngineConfig {
  alphaMs: number;
  betaMs: number;
  gammaMs: number;
  maxNumSeqs: number;
  maxWaiting: number;
  blockSize: number;
  kvBlocks: number;
  /** Most distinct LoRA adapters in one batch; 0 or absent = LoRA off. */
  maxLoras?: number;
  /** Adapters held in memory (LRU); 0 or absent = maxLoras. */
  maxCpuLoras?: number;
  /** Extra iteration time per adapter loaded into memory for its batch. */
  loraLoadMs?: number;
}

export interface SequenceSpec {
  id: string;
  promptTokens: number;
  /** Chained hashes of the prompt's full blocks (hashPromptBlocks of @fairgate/openai). */
  promptBlockHashes: readonly string[];
  /** Tokens to generate before the sequence finishes (>= 1). */
  outputTokens: number;
  /** Opaque to the engine; carried for observers (e.g. the finished_reason label). */
  finishReason: 'stop' | 'length';
  /** The LoRA adapter the sequence runs with; absent for the base model. */
  lora?: string;
  /**
   * A pooling request (embedding, score): its one iteration is the prefill and its one
   * "token" the pooled output, which the metrics do not count as generated.
   */
  prefillOnly?: boolean;
}

export type SequenceState = 'waiting' | 'running' | 'finished' | 'aborted';

/** Receives a sequence's output. Errors thrown here abort that sequence only. */
export interface SequenceListener {
  /** One token was generated; `seq.generated` already counts it. */
  onToken(seq: SequenceView, now: number): void;
  /** All `outputTokens` were generated (called right after the last onToken). */
  onFinish(seq: SequenceView, now: number): void;
}

export interface EngineObserver {
  onSubmit?(seq: SequenceView, now: number): void;
  onIteration?(iteration: Iteration): void;
  /** After an iteration's tokens, finishes included, were delivered. */
  onIterationEnd?(iteration: Iteration, now: number): void;
  onAdmit?(seq: SequenceView, now: number, queryTokens: number, hitTokens: number): void;
  onPreempt?(seq: SequenceView, now: number): void;
  /** `previousTokenMs`: when the sequence's previous token came out, null for its first. */
  onToken?(seq: SequenceView, now: number, previousTokenMs: number | null): void;
  onFinish?(seq: SequenceView, now: number): void;
  onAbort?(seq: SequenceView, now: number): void;
}

interface Sequence {
  readonly spec: SequenceSpec;
  readonly listener: SequenceListener;
  readonly arrivalMs: number;
  state: SequenceState;
  generated: number;
  blocks: KvBlock[];
  /** True from admission until its prefill iteration completes. */
  prefilling: boolean;
  /** Tokens the pending prefill computes (prompt + generated, minus prefix-cache hits). */
  prefillTokens: number;
  /** Prompt tokens served by the prefix cache at first admission (usage cached_tokens). */
  cachedTokens: number | null;
  firstAdmittedMs: number | null;
  firstTokenMs: number | null;
  lastTokenMs: number | null;
  preemptions: number;
}

/** What callers may see of a sequence; only the engine changes it. */
export type SequenceView = Readonly<Omit<Sequence, 'blocks'>> & {
  readonly blocks: readonly KvBlock[];
};

export interface Iteration {
  readonly startMs: number;
  readonly endMs: number;
  readonly durationMs: number;
  readonly batch: readonly SequenceView[];
  readonly prefillSeqs: number;
  readonly prefillTokens: number;
  readonly decodeSeqs: number;
  /** LoRA adapters loaded into memory for this batch (each costs loraLoadMs). */
  readonly loraLoads: number;
}

interface PlannedIteration extends Iteration {
  readonly batch: readonly Sequence[];
}

export class QueueFullError extends Error {
  constructor(readonly capacity: number) {
    super(`waiting queue is full (${capacity} requests)`);
    this.name = 'QueueFullError';
  }
}

export class Engine {
  readonly config: Readonly<EngineConfig>;
  readonly pool: KvBlockPool;
  private readonly observer: EngineObserver;
  private readonly waiting: Sequence[] = [];
  /** Admission order: the last element is the newest, the first to be preempted. */
  private readonly running: Sequence[] = [];
  private current: PlannedIteration | null = null;
  private runningHighWater = 0;
  private preemptionCount = 0;
  /** LoRA adapters in memory; null when LoRA is off. */
  private readonly adapters: AdapterCache | null;

  constructor(config: EngineConfig, observer: EngineObserver = {}) {
    this.config = { ...config };
    this.pool = new KvBlockPool(config.kvBlocks);
    this.observer = observer;
    const maxLoras = config.maxLoras ?? 0;
    this.adapters = maxLoras > 0 ? new AdapterCache(config.maxCpuLoras || maxLoras) : null;
  }

  /** LoRA adapters in memory, least recently used first ([] when LoRA is off). */
  get loadedAdapters(): string[] {
    return this.adapters?.list() ?? [];
  }

  /**
   * Loads an adapter into memory now (a load request), evicting the least recently used
   * one beyond capacity. Returns false when LoRA is off.
   */
  loadAdapter(name: string): boolean {
    this.adapters?.use(name);
    return this.adapters !== null;
  }

  /** Drops an adapter from memory (an unload request); a later batch would load it again. */
  unloadAdapter(name: string): boolean {
    return this.adapters?.remove(name) ?? false;
  }

  get numRunning(): number {
    return this.running.length;
  }

  get numWaiting(): number {
    return this.waiting.length;
  }

  /** Most sequences ever running at once (a probe for the maxNumSeqs invariant). */
  get maxRunningSeen(): number {
    return this.runningHighWater;
  }

  get preemptions(): number {
    return this.preemptionCount;
  }

  get kvUsage(): number {
    return this.pool.usage;
  }

  /** The iteration in flight, if any. */
  get inFlight(): Iteration | null {
    return this.current;
  }

  /** True when an iteration could start now (something runs or waits). */
  get hasWork(): boolean {
    return this.running.length > 0 || this.waiting.length > 0;
  }

  /** Arrival time of the request at the head of the waiting queue, null when none waits. */
  get nextArrivalMs(): number | null {
    return this.waiting[0]?.arrivalMs ?? null;
  }

  /**
   * Queues a new request. Throws QueueFullError when maxWaiting requests already wait, and
   * RangeError for a spec the engine can never serve (it must fit in the KV pool alone).
   */
  submit(spec: SequenceSpec, listener: SequenceListener, now: number): SequenceView {
    if (spec.promptTokens < 1 || spec.outputTokens < 1) {
      throw new RangeError(`sequence ${spec.id} needs >= 1 prompt and output token`);
    }
    const blocks = kvBlocksFor(spec.promptTokens + spec.outputTokens, this.config.blockSize);
    if (blocks > this.pool.total) {
      throw new RangeError(
        `sequence ${spec.id} needs ${blocks} KV blocks, pool has ${this.pool.total}`,
      );
    }
    if (this.waiting.length >= this.config.maxWaiting)
      throw new QueueFullError(this.config.maxWaiting);
    const seq: Sequence = {
      spec,
      listener,
      arrivalMs: now,
      state: 'waiting',
      generated: 0,
      blocks: [],
      prefilling: false,
      prefillTokens: 0,
      cachedTokens: null,
      firstAdmittedMs: null,
      firstTokenMs: null,
      lastTokenMs: null,
      preemptions: 0,
    };
    this.waiting.push(seq);
    this.observer.onSubmit?.(seq, now);
    return seq;
  }

  /**
   * Removes a waiting or running sequence at once (client gone): its seat and blocks are
   * free for the next iteration. If it is in the iteration in flight, that iteration keeps
   * its duration (the work was launched) but emits nothing for it. Returns false when the
   * sequence had already ended.
   */
  abort(view: SequenceView, now: number): boolean {
    const seq = view as Sequence;
    if (seq.state === 'waiting') {
      removeItem(this.waiting, seq);
    } else if (seq.state === 'running') {
      this.retire(seq);
    } else {
      return false;
    }
    seq.state = 'aborted';
    this.observer.onAbort?.(seq, now);
    return true;
  }

  /**
   * Schedules the next iteration starting at `now` and returns it, or null when there is
   * nothing to run (idle). Call completeIteration at (or after) its endMs.
   *
   * Invariant: an iteration takes in only requests that had arrived when it started
   * (`arrivalMs <= admitArrivedBy`, by default its start `now`). One that arrives later
   * waits for the next iteration, as in the model (the residual wait), even if it is
   * already queued when this one is planned (a real-time driver whose timer fired late).
   */
  beginIteration(now: number, admitArrivedBy = now): Iteration | null {
    if (this.current) throw new Error('an iteration is already in flight');
    const preempted = this.reserveDecodeBlocks(now);
    if (!preempted) this.admitWaiting(now, admitArrivedBy);
    if (this.running.length === 0) return null;

    const { alphaMs, betaMs, gammaMs } = this.config;
    const loraLoads = this.loadBatchAdapters();
    let work = loraLoads * (this.config.loraLoadMs ?? 0);
    let prefillSeqs = 0;
    let prefillTokens = 0;
    for (const seq of this.running) {
      if (seq.prefilling) {
        work += (betaMs + gammaMs) * seq.prefillTokens;
        prefillSeqs++;
        prefillTokens += seq.prefillTokens;
      } else {
        work += betaMs + gammaMs * (seq.spec.promptTokens + seq.generated);
      }
    }
    const durationMs = alphaMs + work;
    this.current = {
      startMs: now,
      endMs: now + durationMs,
      durationMs,
      batch: [...this.running],
      prefillSeqs,
      prefillTokens,
      decodeSeqs: this.running.length - prefillSeqs,
      loraLoads,
    };
    this.observer.onIteration?.(this.current);
    return this.current;
  }

  /**
   * Ends the iteration in flight at `now`: every sequence of its batch still running emits
   * one token; those reaching their output length finish and free their blocks.
   */
  completeIteration(now: number): void {
    const iteration = this.current;
    if (!iteration) throw new Error('no iteration in flight');
    this.current = null;
    for (const seq of iteration.batch) {
      if (seq.state !== 'running') continue; // aborted while the iteration ran
      const previousTokenMs = seq.lastTokenMs;
      seq.prefilling = false;
      seq.generated++;
      seq.firstTokenMs ??= now;
      seq.lastTokenMs = now;
      this.observer.onToken?.(seq, now, previousTokenMs);
      this.notify(seq, now, () => seq.listener.onToken(seq, now));
      if (seq.state === 'running' && seq.generated >= seq.spec.outputTokens) {
        this.retire(seq);
        seq.state = 'finished';
        this.observer.onFinish?.(seq, now);
        this.notify(seq, now, () => seq.listener.onFinish(seq, now));
      }
    }
    this.observer.onIterationEnd?.(iteration, now);
  }

  /** Aborts everything (shutdown). */
  abortAll(now: number): void {
    for (const seq of [...this.running, ...this.waiting]) this.abort(seq, now);
  }

  /**
   * Gives every running sequence the blocks its next decode step needs, oldest first,
   * preempting the newest sequences when the pool runs dry. Returns true if any preemption
   * happened (then nothing is admitted this step, as in vLLM).
   */
  private reserveDecodeBlocks(now: number): boolean {
    let preempted = false;
    for (let index = 0; index < this.running.length; index++) {
      const seq = this.running[index]!;
      const needed = kvBlocksFor(seq.spec.promptTokens + seq.generated, this.config.blockSize);
      const missing = needed - seq.blocks.length;
      if (missing <= 0) continue;
      while (this.pool.freeCount < missing) {
        const victim = this.running[this.running.length - 1]!;
        this.preempt(victim, now);
        preempted = true;
        if (victim === seq) break;
      }
      // A sequence that had to preempt itself was the newest: nothing runs after it.
      if (seq.state !== 'running') break;
      seq.blocks.push(...this.pool.allocate(missing));
    }
    return preempted;
  }

  private preempt(seq: Sequence, now: number): void {
    this.retire(seq);
    seq.state = 'waiting';
    seq.preemptions++;
    this.preemptionCount++;
    // Head of the queue: preempting newest-first and prepending each keeps the oldest first.
    this.waiting.unshift(seq);
    this.observer.onPreempt?.(seq, now);
  }

  private admitWaiting(now: number, arrivedBy: number): void {
    const { blockSize, maxNumSeqs } = this.config;
    const batchLoras = this.adapters ? this.runningAdapters() : null;
    const maxLoras = this.config.maxLoras ?? 0;
    let index = 0; // sequences before it were skipped for their adapter
    while (index < this.waiting.length && this.running.length < maxNumSeqs) {
      const seq = this.waiting[index]!;
      // The queue is in arrival order (preempted sequences, at its head, arrived earlier).
      if (seq.arrivalMs > arrivedBy) break;
      const lora = seq.spec.lora;
      if (lora && batchLoras && !batchLoras.has(lora) && batchLoras.size >= maxLoras) {
        index++; // vLLM: would exceed max_loras, skipped; it keeps its place in the queue
        continue;
      }
      const tokens = seq.spec.promptTokens + seq.generated;
      // At least the last token is always computed (vLLM: a full hit still runs one token
      // to produce logits), so only blocks entirely before it can hit.
      const maxHitBlocks = Math.floor((tokens - 1) / blockSize);
      const hits = this.pool.lookup(seq.spec.promptBlockHashes, maxHitBlocks);
      const fresh = kvBlocksFor(tokens, blockSize) - hits.length;
      if (this.pool.freeBlocksNeeded(hits, fresh) > this.pool.freeCount) break; // FIFO: no overtaking

      this.waiting.splice(index, 1);
      if (lora) batchLoras?.add(lora);
      this.pool.acquire(hits);
      seq.blocks = [...hits, ...this.pool.allocate(fresh)];
      const fullPromptBlocks = Math.min(seq.spec.promptBlockHashes.length, seq.blocks.length);
      for (let index = hits.length; index < fullPromptBlocks; index++) {
        this.pool.cache(seq.blocks[index]!, seq.spec.promptBlockHashes[index]!);
      }
      const hitTokens = hits.length * blockSize;
      seq.prefillTokens = tokens - hitTokens;
      seq.cachedTokens ??= hitTokens;
      seq.firstAdmittedMs ??= now;
      seq.prefilling = true;
      seq.state = 'running';
      this.running.push(seq);
      this.runningHighWater = Math.max(this.runningHighWater, this.running.length);
      this.observer.onAdmit?.(seq, now, seq.spec.promptTokens, hitTokens);
    }
  }

  /** Adapters of the running sequences. */
  private runningAdapters(): Set<string> {
    const names = new Set<string>();
    for (const seq of this.running) if (seq.spec.lora) names.add(seq.spec.lora);
    return names;
  }

  /** Marks the batch's adapters used; returns how many had to be loaded into memory. */
  private loadBatchAdapters(): number {
    if (!this.adapters) return 0;
    const batch = this.runningAdapters();
    let loads = 0;
    for (const name of batch) if (this.adapters.use(name, batch)) loads++;
    return loads;
  }

  /** Takes a running sequence out of the batch and frees its blocks. */
  private retire(seq: Sequence): void {
    removeItem(this.running, seq);
    this.pool.release(seq.blocks);
    seq.blocks = [];
    seq.prefilling = false;
  }

  private notify(seq: Sequence, now: number, deliver: () => void): void {
    try {
      deliver();
    } catch {
      // A broken consumer (e.g. a stream that went away) loses its own sequence only.
      this.abort(seq, now);
    }
  }
}

function removeItem<T>(items: T[], item: T): void {
  const index = items.indexOf(item);
  if (index >= 0) items.splice(index, 1);
}
