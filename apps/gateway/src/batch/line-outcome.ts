import { randomBytes } from 'node:crypto';
import { retryOutlook } from '@fairgate/core';

/**
 * What one try of a batch line came to, from the gateway's own answer to it (the line went
 * through the request pipeline like a live request: line-runner.ts). An answer whose code
 * core's outcome table says waiting can help (a flow-control drop that can pass later, a
 * 503) is tried again later, never written to the error file; a pod's failure gets
 * UPSTREAM_TRIES tries (docs/batch.md, *Retries*). Any other answer (the pod's, success or
 * client error, or a drop that can never pass) is the line's result in OpenAI's batch
 * output format.
 */
export type LineOutcome =
  | { readonly kind: 'output' | 'error'; readonly line: string }
  | { readonly kind: 'retry'; readonly reason: string }
  /** Its batch was cancelled while it waited for a slot: it never ran (in neither file). */
  | { readonly kind: 'skipped' };

export interface LineAnswer {
  readonly status: number;
  /** The gateway's x-request-id. */
  readonly requestId: string;
  readonly body: string;
  /** Whether the answer carried Retry-After (a `rate_limited` drop without one never passes). */
  readonly retryAfter: boolean;
}

/** Tries of one line that may end in a pod failure (502/504) before it is an error line. */
export const UPSTREAM_TRIES = 3;

/**
 * The outcome of an answer. `upstreamFailures` counts the line's earlier 502/504 answers:
 * the UPSTREAM_TRIES-th is written to the error file.
 */
export function lineOutcome(
  customId: string,
  answer: LineAnswer,
  upstreamFailures: number,
): LineOutcome {
  const { status } = answer;
  const code = errorCode(answer.body);
  if (status === 409 && code === 'batch_cancelled') return { kind: 'skipped' };
  const outlook = retryOutlook(status, code, answer.retryAfter);
  const tryAgain =
    outlook === 'after_waiting' ||
    (outlook === 'another_try' && upstreamFailures + 1 < UPSTREAM_TRIES);
  if (tryAgain && code !== undefined) return { kind: 'retry', reason: code };
  const kind = status >= 200 && status < 300 ? 'output' : 'error';
  return {
    kind,
    line: outputLine(customId, {
      status_code: status,
      request_id: answer.requestId,
      body: parsedBody(answer.body),
    }),
  };
}

/** A line that never ran to an answer (OpenAI's `error` member): e.g. batch_expired. */
export function errorLine(customId: string, code: string, message: string): string {
  return JSON.stringify({
    id: lineId(),
    custom_id: customId,
    response: null,
    error: { code, message },
  });
}

function outputLine(
  customId: string,
  response: { status_code: number; request_id: string; body: unknown },
): string {
  return JSON.stringify({ id: lineId(), custom_id: customId, response, error: null });
}

/** `batch_req_` + 24 hex characters. */
function lineId(): string {
  return `batch_req_${randomBytes(12).toString('hex')}`;
}

function parsedBody(body: string): unknown {
  try {
    return JSON.parse(body);
  } catch {
    return body;
  }
}

function errorCode(body: string): string | undefined {
  const parsed = parsedBody(body) as { error?: { code?: unknown } } | undefined;
  const code = parsed?.error?.code;
  return typeof code === 'string' ? code : undefined;
}
