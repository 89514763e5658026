import { RejectCode } from '@fairgate/core';

/**
 * Every negative integer a script returns. lua/includes/codes.lua holds the same table (a
 * test compares them); callers never match on error strings.
 */
export enum ScriptCode {
  TenantQueueFull = -1,
  BandFull = -2,
  GlobalQueueFull = -3,
  QuotaConcurrencyNeverFits = -4,
  QuotaKvBlocksNeverFits = -5,
  NoHealthyPod = -6,
  RateLimited = -7,
  ShedByTier = -8,
  Saturated = -9,
  RejectedByPolicy = -10,
  BudgetExhausted = -11,
  RequestRateLimited = -12,
  NotConfigured = -20,
  UnknownTenant = -21,
  StaleFence = -22,
}

const REJECTIONS: ReadonlyMap<ScriptCode, RejectCode> = new Map([
  [ScriptCode.TenantQueueFull, RejectCode.TenantQueueFull],
  [ScriptCode.BandFull, RejectCode.BandFull],
  [ScriptCode.GlobalQueueFull, RejectCode.GlobalQueueFull],
  [ScriptCode.QuotaConcurrencyNeverFits, RejectCode.QuotaConcurrencyNeverFits],
  [ScriptCode.QuotaKvBlocksNeverFits, RejectCode.QuotaKvBlocksNeverFits],
  [ScriptCode.NoHealthyPod, RejectCode.NoHealthyPod],
  [ScriptCode.RateLimited, RejectCode.RateLimited],
  [ScriptCode.ShedByTier, RejectCode.ShedByTier],
  [ScriptCode.Saturated, RejectCode.Saturated],
  [ScriptCode.RejectedByPolicy, RejectCode.RejectedByPolicy],
  [ScriptCode.BudgetExhausted, RejectCode.BudgetExhausted],
  // A full minute of the tenant's requests_per_minute: the same answer as its token bucket.
  [ScriptCode.RequestRateLimited, RejectCode.RateLimited],
]);

/** The rejection a code stands for, or undefined when the code is not a rejection. */
export function rejectionOf(code: number): RejectCode | undefined {
  return REJECTIONS.get(code as ScriptCode);
}

const ERROR_MESSAGES: Partial<Record<ScriptCode, string>> = {
  [ScriptCode.NotConfigured]: 'the pool has no settings yet: call configure() first',
  [ScriptCode.UnknownTenant]: 'unknown tenant: call upsertTenants() first',
  [ScriptCode.StaleFence]: 'not the leader in this epoch',
};

/** A scheduler call that cannot be served as asked (configuration or programming error). */
export class SchedulerError extends Error {
  readonly code: ScriptCode;

  constructor(code: ScriptCode, message: string) {
    super(message);
    this.name = 'SchedulerError';
    this.code = code;
  }
}

/** The one error factory for script codes; `context` names the operation and its subject. */
export function schedulerError(code: number, context: string): SchedulerError {
  const known = ERROR_MESSAGES[code as ScriptCode] ?? `unexpected script code ${code}`;
  return new SchedulerError(code as ScriptCode, `${context}: ${known}`);
}
