import type { ReleaseOutcome } from '@fairgate/core';
import type { Usage } from '@fairgate/openai';
import { Attr, endSpan } from '@fairgate/telemetry';
import type { HeldSlot } from '../slot/held-slot.js';

/**
 * Stage 6: t7, the one terminal outcome of a granted request. Runs once, whatever ended the
 * request: ends the hold (HeldSlot.end), releases the slot with the outcome and the actual
 * usage (unless the relay released it already, HeldSlot.release), counts it and ends the
 * SERVER span.
 */
export function finish(
  held: HeldSlot,
  outcome: ReleaseOutcome,
  usage: Usage | undefined,
  status: number,
  error?: unknown,
): void {
  if (!held.end()) return;
  const { call } = held;
  const final = held.release(outcome, usage);
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
