import type { ReleaseOutcome } from '@fairgate/core';
import type { Usage } from '@fairgate/openai';
import { Attr, endSpan } from '@fairgate/telemetry';
import { actualBucketTokens } from '../classify.js';
import type { DrainTicket } from '../drain.js';
import { EvictedError } from '../grants.js';
import type { SlotAbort } from '../upstream/slot-abort.js';
import type { Call } from './receive.js';
import type { Granted } from './wait-for-grant.js';

/**
 * Stage 6: t7, the one terminal outcome of a granted request. From the grant (t2) to
 * `finish` the request holds its slot: the broker tracks it (heartbeats extend its lease;
 * an eviction aborts it), the drain counts it, the client leaving aborts its upstream call.
 * `finish` runs once, whatever ended the request: it releases the slot in the scheduler
 * with the outcome (completed, cancelled, evicted, upstream_error) and the actual usage,
 * counts it and ends the SERVER span.
 */
export class HeldSlot {
  /** Aborts the upstream call: the client left, the scheduler evicted it, or the drain ended. */
  readonly abort: SlotAbort;
  /** t2 - t1 in milliseconds (the `x-fairgate-queue-ms` header). */
  readonly queueMs: number;
  #stopAbortOnLeave: () => void;
  #finished = false;

  constructor(
    private readonly call: Call,
    private readonly granted: Granted,
    private readonly ticket: DrainTicket,
  ) {
    const { lane, pod, request } = granted;
    this.queueMs = performance.now() - call.state.t1;
    call.series.queueWait.observe(this.queueMs / 1_000);
    call.span.setAttributes({ [Attr.pod]: pod, [Attr.queueMs]: this.queueMs });
    this.abort = lane.broker.track(request.id, pod, request);
    ticket.hold(this.abort);
    this.#stopAbortOnLeave = call.client.onLeave(() =>
      this.abort.abort(new Error('client closed the connection')),
    );
    call.pool.metrics.inflight.inc();
  }

  get evicted(): boolean {
    return this.abort.reason instanceof EvictedError;
  }

  finish(outcome: ReleaseOutcome, usage: Usage | undefined, status: number, error?: unknown): void {
    if (this.#finished) return;
    this.#finished = true;
    const { call, granted } = this;
    const { lane, request } = granted;
    this.ticket.leave();
    this.#stopAbortOnLeave();
    lane.broker.untrack(request.id);
    call.pool.metrics.inflight.dec();
    const final: ReleaseOutcome = outcome !== 'completed' && this.evicted ? 'evicted' : outcome;
    const bucketed = call.cls.bucketTokens > 0;
    void lane.scheduler
      .release(request.id, {
        outcome: final,
        ...(usage
          ? {
              usage: { inputTokens: usage.prompt_tokens, outputTokens: usage.completion_tokens },
              ...(bucketed ? { actualTokens: actualBucketTokens(call.tenant, usage) } : {}),
            }
          : {}),
      })
      .catch(() => call.pool.metrics.redisErrors.inc({ operation: 'release' }));
    call.series.outcome(final).inc();
    call.series.requestDuration.observe((performance.now() - call.state.t1) / 1_000);
    if (usage) {
      call.span.setAttributes({
        [Attr.inputTokens]: usage.prompt_tokens,
        [Attr.outputTokens]: usage.completion_tokens,
      });
    }
    call.span.setAttribute(Attr.outcome, final);
    endSpan(call.span, { status, ...(error && status >= 500 ? { error } : {}) });
  }
}
