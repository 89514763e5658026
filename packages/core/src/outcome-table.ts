import { RejectCode } from './rejections.js';

/**
 * The one table of the answers that refuse, drop or fail a request: for each code, its
 * HTTP status, OpenAI error type, whether waiting can help (and so its Retry-After), its
 * message and whether it names itself in `x-fairgate-drop-reason`. The code is the OpenAI
 * error `code` of the answer, the drop-reason header's value and the drops metric's reason
 * label. The gateway's error factories (apps/gateway/src/errors.ts) render these rows, and
 * the Batch API (batch/line-outcome.ts) and fairgate-load read them to decide what an
 * answer means. (The terminal outcomes of admitted requests are in outcomes.ts.)
 */

/** Names the code of a flow-control drop in every such answer (and the SSE error's code). */
export const DROP_REASON_HEADER = 'x-fairgate-drop-reason';

/** Drops decided after admission, by a scheduler notice: queue TTL, eviction, shedding. */
export type NoticeDropCode = 'queue_ttl' | 'evicted' | 'queue_shed';

/** The gateway's own drops and failures, decided outside the scheduler's enqueue. */
export type GatewayOutcomeCode =
  | 'upstream_busy'
  | 'scheduler_unavailable'
  | 'draining'
  | 'replica_unreachable'
  | 'upstream_error'
  | 'upstream_reset'
  | 'upstream_truncated'
  | 'upstream_timeout';

export type OutcomeCode = RejectCode | NoticeDropCode | GatewayOutcomeCode;

/** Every value `x-fairgate-drop-reason` (and the drops metric's reason label) can take. */
export type DropReason = RejectCode | NoticeDropCode | 'upstream_busy';

/**
 * Whether waiting can help a request refused with the code, and so its Retry-After:
 * - `fixed`: yes, soon; Retry-After is the row's `retryAfterMs`.
 * - `refill`: once the tenant's token bucket holds the request's cost, or its budget's or
 *   rate's window ends; Retry-After is the scheduler's estimate of that refill or the
 *   window's end, and absent when the cost exceeds the bucket's capacity (then it never
 *   will).
 * - `never`: no, the request can never pass as it is; no Retry-After.
 * - `another_try`: a pod failed; another try may pass, with no promise of when (no
 *   Retry-After; a batch line gets a few tries).
 */
export type Waiting = 'fixed' | 'refill' | 'never' | 'another_try';

/** The OpenAI error types these answers use. */
export type OutcomeErrorType =
  | 'rate_limit_error'
  | 'service_unavailable_error'
  | 'upstream_error'
  | 'timeout_error';

export interface OutcomeRow {
  readonly status: 429 | 502 | 503 | 504;
  readonly type: OutcomeErrorType;
  readonly waiting: Waiting;
  /** Retry-After of a `fixed` row, in ms (rounded up to whole seconds in Retry-After). */
  readonly retryAfterMs?: number;
  /**
   * A flow-control drop: the answer carries `x-fairgate-drop-reason` (the code) and, with
   * its Retry-After, `retry-after-ms`. The 503s and upstream failures carry neither.
   */
  readonly dropReasonHeader: boolean;
  /** The answer carries `connection: close` (a keep-alive client reconnects elsewhere). */
  readonly closesConnection?: boolean;
  /** Default message; `{tenant}`, `{class}` and `{cost}` name the request's (DropContext). */
  readonly message: string;
}

/** What a rejection's message names. */
export interface DropContext {
  readonly tenant: string;
  readonly sloClass: string;
  /** The request's token-bucket cost. */
  readonly cost: number;
}

const SECOND = 1_000;

function flowControl(message: string, waiting: Waiting = 'fixed'): OutcomeRow {
  return {
    status: 429,
    type: 'rate_limit_error',
    waiting,
    ...(waiting === 'fixed' ? { retryAfterMs: SECOND } : {}),
    dropReasonHeader: true,
    message,
  };
}

function unavailable(message: string, closesConnection = false): OutcomeRow {
  return {
    status: 503,
    type: 'service_unavailable_error',
    waiting: 'fixed',
    retryAfterMs: SECOND,
    dropReasonHeader: false,
    ...(closesConnection ? { closesConnection } : {}),
    message,
  };
}

function podFailure(status: 502 | 504, message: string): OutcomeRow {
  return {
    status,
    type: status === 502 ? 'upstream_error' : 'timeout_error',
    waiting: 'another_try',
    dropReasonHeader: false,
    message,
  };
}

export const OUTCOME_TABLE: Readonly<Record<OutcomeCode, OutcomeRow>> = {
  // Refused at enqueue (RejectCode).
  [RejectCode.TenantQueueFull]: flowControl("Tenant '{tenant}' has too many requests waiting"),
  [RejectCode.BandFull]: flowControl('Too many requests of this priority are waiting'),
  [RejectCode.GlobalQueueFull]: flowControl('The gateway queue is full'),
  [RejectCode.QuotaConcurrencyNeverFits]: flowControl(
    "Tenant '{tenant}' has no concurrency quota",
    'never',
  ),
  [RejectCode.QuotaKvBlocksNeverFits]: flowControl(
    "The request needs more KV-cache blocks than tenant '{tenant}' may hold",
    'never',
  ),
  [RejectCode.NoHealthyPod]: unavailable('No healthy inference pod is available'),
  [RejectCode.RateLimited]: flowControl(
    "Tenant '{tenant}' is over its token rate limit (this request costs {cost} tokens)",
    'refill',
  ),
  [RejectCode.BudgetExhausted]: flowControl(
    "Tenant '{tenant}' has spent its token budget for this period",
    'refill',
  ),
  [RejectCode.ShedByTier]: flowControl("The pool is overloaded: class '{class}' is shed"),
  [RejectCode.Saturated]: flowControl(
    "The pool is saturated: sheddable class '{class}' is refused",
  ),
  [RejectCode.RejectedByPolicy]: flowControl(
    'The gateway admits no requests at the moment (admission policy reject-all)',
  ),
  // Ended by a scheduler notice while waiting or in flight.
  queue_ttl: flowControl('The request waited longer than the queue TTL'),
  evicted: flowControl('The request was evicted by flow control'),
  queue_shed: flowControl('A higher-priority request took this queue slot'),
  // The gateway's own.
  upstream_busy: flowControl('The inference pods are saturated'),
  scheduler_unavailable: unavailable(
    'The scheduler is unavailable (its Redis cannot be reached); retry shortly',
  ),
  draining: unavailable('This gateway replica is shutting down; retry on another replica', true),
  /** The batch worker's own answer when its replica's server cannot be reached (closing). */
  replica_unreachable: unavailable('The gateway replica cannot be reached'),
  upstream_error: podFailure(502, 'The inference pod failed'),
  /** Mid-stream (an SSE error event): the pod's connection was reset. */
  upstream_reset: podFailure(502, 'The inference pod reset the stream'),
  /** Mid-stream (an SSE error event): the pod's stream ended without its end marker. */
  upstream_truncated: podFailure(502, 'The inference pod ended the stream early'),
  upstream_timeout: podFailure(504, 'The inference pod did not answer in time'),
};

/** The row of `code`, or undefined when the code is not in the table (e.g. a pod's own). */
export function outcomeRow(code: string | null | undefined): OutcomeRow | undefined {
  if (code == null || !Object.hasOwn(OUTCOME_TABLE, code)) return undefined;
  return OUTCOME_TABLE[code as OutcomeCode];
}

/**
 * Whether `code` (an `x-fairgate-drop-reason`, or a mid-stream SSE error's code) is a
 * flow-control drop, as opposed to a failure.
 */
export function isFlowControlDrop(code: string | null | undefined): boolean {
  return outcomeRow(code)?.dropReasonHeader === true;
}

/** The drop a scheduler notice that ends a request stands for. */
export type DropNotice = 'expired' | 'evict' | 'shed';

const NOTICE_DROPS: Readonly<Record<DropNotice, NoticeDropCode>> = {
  // Waited longer than the queue TTL.
  expired: 'queue_ttl',
  // A lease lapsed, or in-flight eviction took the slot.
  evict: 'evicted',
  // Queue shedding: a higher-priority arrival took its place (its outcome is evicted).
  shed: 'queue_shed',
};

export function noticeDropCode(kind: DropNotice): NoticeDropCode {
  return NOTICE_DROPS[kind];
}

/** The parts of an answer the table decides: all but the OpenAI error class around them. */
export interface OutcomeAnswer {
  readonly status: number;
  readonly type: OutcomeErrorType;
  readonly code: OutcomeCode;
  readonly message: string;
  readonly headers: Record<string, string>;
}

export interface OutcomeOptions {
  /** Fills the message's `{tenant}`, `{class}` and `{cost}`. */
  readonly context?: DropContext;
  /** Replaces the table's message. */
  readonly message?: string;
  /** A `refill` row's Retry-After: the scheduler's estimate, or none when it never refills. */
  readonly refillMs?: number | null;
}

/** The answer to a request ended with `code`: status, type, message and headers. */
export function outcomeAnswer(code: OutcomeCode, options: OutcomeOptions = {}): OutcomeAnswer {
  const row = OUTCOME_TABLE[code];
  const headers: Record<string, string> = {};
  const retryAfterMs = row.waiting === 'refill' ? options.refillMs : row.retryAfterMs;
  if (retryAfterMs != null) {
    headers['retry-after'] = String(Math.max(1, Math.ceil(retryAfterMs / SECOND)));
    if (row.dropReasonHeader)
      headers['retry-after-ms'] = String(Math.max(1, Math.round(retryAfterMs)));
  }
  if (row.dropReasonHeader) headers[DROP_REASON_HEADER] = code;
  if (row.closesConnection) headers.connection = 'close';
  const message = options.message ?? fillMessage(row.message, options.context);
  return { status: row.status, type: row.type, code, message, headers };
}

function fillMessage(template: string, context: DropContext | undefined): string {
  return template.replace(/\{(tenant|class|cost)\}/g, (placeholder, name: string) => {
    if (!context) return placeholder;
    if (name === 'tenant') return context.tenant;
    if (name === 'class') return context.sloClass;
    return String(context.cost);
  });
}

/** What sending the same request again can do after an answer (retryOutlook). */
export type RetryOutlook = 'after_waiting' | 'another_try' | 'never';

/**
 * What sending the same request again can do after an answer of `status` with error
 * `code`, by the code's row: `after_waiting` when waiting helps (a `refill` row only when
 * the answer carried a Retry-After), `another_try` after a pod's failure, else `never`
 * (waiting cannot help, or the answer is not one of the table's: a pod's own, a success).
 */
export function retryOutlook(
  status: number,
  code: string | null | undefined,
  retryAfter: boolean,
): RetryOutlook {
  const row = outcomeRow(code);
  if (!row || row.status !== status) return 'never';
  if (row.waiting === 'fixed' || (row.waiting === 'refill' && retryAfter)) return 'after_waiting';
  return row.waiting === 'another_try' ? 'another_try' : 'never';
}
