import type { ReleaseOutcome } from '@fairgate/core';
import type { Usage } from '@fairgate/openai';
import type { ReleaseOptions } from '@fairgate/scheduler';
import { Attr } from '@fairgate/telemetry';
import { actualBucketTokens } from '../classify.js';
import type { DrainTicket } from '../drain.js';
import type { Call } from '../request/receive.js';
import type { Granted } from '../request/wait-for-grant.js';
import type { SlotAbort } from '../upstream/slot-abort.js';
import { EvictedError } from './held-leases.js';

/**
 * Transitions granted → held → (recycled | released) of one request. Built at t2, the
 * grant: from then on the request holds its slot: the replica's HeldLeases track it
 * (heartbeats extend its lease; an eviction aborts it), the drain counts it, the client
 * leaving aborts its upstream call. `release` hands the slot back once, with the outcome
 * (completed, cancelled, evicted, upstream_error) and the actual usage: parked for the next
 * request of its kind (SlotRecycler) or released in the scheduler. The relay calls it as
 * soon as the pod's answer is written; t7 (request/finalize.ts) ends the hold (`end`) and
 * releases when the relay did not.
 */
export class HeldSlot {
  /** Aborts the upstream call: the client left, the scheduler evicted it, or the drain ended. */
  readonly abort: SlotAbort;
  /** t2 - t1 in milliseconds (the `x-fairgate-queue-ms` header). */
  readonly queueMs: number;
  #stopAbortOnLeave: () => void;
  #ended = false;
  /** The outcome the slot was released with, once `release` ran. */
  #released: ReleaseOutcome | undefined;

  constructor(
    readonly call: Call,
    private readonly granted: Granted,
    private readonly ticket: DrainTicket,
  ) {
    const { lane, pod, request } = granted;
    this.queueMs = performance.now() - call.state.t1;
    call.series.queueWait.observe(this.queueMs / 1_000);
    call.span.setAttributes({ [Attr.pod]: pod, [Attr.queueMs]: this.queueMs });
    this.abort = lane.leases.track(request.id, pod, request);
    ticket.hold(this.abort);
    this.#stopAbortOnLeave = call.client.onLeave(() =>
      this.abort.abort(new Error('client closed the connection')),
    );
    call.pool.metrics.inflight.inc();
  }

  get evicted(): boolean {
    return this.abort.reason instanceof EvictedError;
  }

  /**
   * Hands the slot back now (the scheduler's release, with the outcome and the actual
   * usage): the relay calls it the moment the pod's answer is complete and written to the
   * client's socket (the write to Redis comes right after the client's, so neither the
   * client's last bytes nor the dispatch pass that grants the next waiting request wait for
   * the request's bookkeeping). Once only; t7 (finalize) releases when this was not called.
   * Returns the outcome released with (a cancel of an evicted request is released as
   * evicted).
   */
  release(outcome: ReleaseOutcome, usage: Usage | undefined): ReleaseOutcome {
    if (this.#released) return this.#released;
    const { call, granted } = this;
    const { lane, request, pod } = granted;
    const final: ReleaseOutcome = outcome !== 'completed' && this.evicted ? 'evicted' : outcome;
    this.#released = final;
    if (usage) call.pool.usage.record(call.tenant.id, call.forwarding.model, usage, request.band);
    const bucketed = call.cls.bucketTokens > 0;
    const cachedBlocks = this.prefixCachedBlocks(usage);
    const options: ReleaseOptions = {
      outcome: final,
      ...(usage
        ? {
            usage: { inputTokens: usage.prompt_tokens, outputTokens: usage.completion_tokens },
            ...(bucketed ? { actualTokens: actualBucketTokens(call.tenant, usage) } : {}),
          }
        : {}),
      ...(cachedBlocks === undefined ? {} : { prefixCachedBlocks: cachedBlocks }),
    };
    // A completed request's slot may wait for this replica's next request of its kind (not
    // one routed by prefix: its release checks the index's prediction).
    const kvQuota = call.tenant.quotas.max_kv_blocks !== undefined;
    if (
      final === 'completed' &&
      !call.prefix?.length &&
      lane.recycler?.park(request, pod, options, kvQuota)
    ) {
      return final;
    }
    lane.leases.untrack(request.id);
    void lane.scheduler.release(request.id, options).then(
      (ended) => {
        if (ended.predictedBlocks === undefined || cachedBlocks === undefined) return;
        const blockSize = call.pool.config().scheduler.kv_block_size;
        const { prefixPredictedTokens, prefixCachedTokens } = call.pool.metrics;
        prefixPredictedTokens.inc({ pod }, ended.predictedBlocks * blockSize);
        prefixCachedTokens.inc({ pod }, cachedBlocks * blockSize);
      },
      () => call.pool.metrics.redisErrors.inc({ operation: 'release' }),
    );
    return final;
  }

  /**
   * Leading prompt blocks the pod served from its prefix cache, for a request routed by
   * prefix whose usage says (vLLM reports cached_tokens with --enable-prompt-tokens-details):
   * at most its keys, so predicted and actual count the same span.
   */
  private prefixCachedBlocks(usage: Usage | undefined): number | undefined {
    const keys = this.call.prefix?.length ?? 0;
    const cached = usage?.prompt_tokens_details?.cached_tokens;
    if (keys === 0 || typeof cached !== 'number' || !Number.isInteger(cached) || cached < 0) {
      return undefined;
    }
    return Math.min(keys, Math.floor(cached / this.call.pool.config().scheduler.kv_block_size));
  }

  /**
   * Ends the hold, once: the drain no longer waits for it, the client leaving no longer
   * aborts it, the in-flight gauge drops. False when it had ended already.
   */
  end(): boolean {
    if (this.#ended) return false;
    this.#ended = true;
    this.ticket.leave();
    this.#stopAbortOnLeave();
    this.call.pool.metrics.inflight.dec();
    return true;
  }
}
