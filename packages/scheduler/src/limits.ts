import {
  currentCounters,
  hasLimits,
  type LimitCounters,
  type LimitStanding,
  type LimitsStanding,
  limitsStanding,
  limitWindows,
  type RejectCode,
  type TenantLimits,
} from '@fairgate/core';
import { ScriptCode } from './codes.js';
import type { EnqueueResult } from './contract.js';

/**
 * The parts of an enqueue's answer that a tenant's budgets and rates add (both schedulers):
 * which limit refused, and the standing every answer carries.
 */

/** The limit a script code refuses for: a token window, or the request rate. */
export function limitOf(code: number): 'requests' | 'tokens' | undefined {
  if (code === ScriptCode.BudgetExhausted) return 'tokens';
  if (code === ScriptCode.RequestRateLimited) return 'requests';
  return undefined;
}

/** A rejection, with only the fields it has. */
export function rejected(
  code: RejectCode,
  retryAfterMs: number | undefined,
  limit: 'requests' | 'tokens' | undefined,
  limits: LimitsStanding | undefined,
): EnqueueResult {
  return {
    status: 'rejected',
    code,
    ...(retryAfterMs !== undefined ? { retryAfterMs } : {}),
    ...(limit ? { limit } : {}),
    ...(limits ? { limits } : {}),
  };
}

/** A fresh result with the tenant's standing, where it has one (set on it: no copy). */
export function withLimits<R extends EnqueueResult>(
  result: R,
  limits: LimitsStanding | undefined,
): R {
  if (limits) (result as R & { limits?: LimitsStanding }).limits = limits;
  return result;
}

/**
 * The 6 numbers of a reply from index `at` (lua/includes/limits.lua appendStanding): after
 * an enqueue reply's first 4, a handover reply's first 3.
 */
export function decodeStanding(reply: readonly unknown[], at = 4): LimitsStanding {
  return { requests: decodeLimit(reply, at), tokens: decodeLimit(reply, at + 3) };
}

/** One limit's 3 numbers (limit, remaining, reset ms) from index `at`; null where -1. */
function decodeLimit(reply: readonly unknown[], at: number): LimitStanding | null {
  const limit = Number(reply[at]);
  if (!(limit >= 0)) return null;
  return { limit, remaining: Number(reply[at + 1]), resetMs: Number(reply[at + 2]) };
}

/** A tenant's standing at nowMs from its stored counters; null when it has no limit. */
export function standingAt(
  limits: TenantLimits,
  counters: LimitCounters,
  nowMs: number,
): LimitsStanding | null {
  if (!hasLimits(limits)) return null;
  const windows = limitWindows(nowMs);
  return limitsStanding(limits, currentCounters(counters, windows), windows, nowMs);
}
