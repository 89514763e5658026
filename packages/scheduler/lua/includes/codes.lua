-- Negative return codes. ScriptCode in src/codes.ts mirrors this table (a test compares).
local Code = {
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
