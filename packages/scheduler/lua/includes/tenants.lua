-- tenant:<tenant> hash: configuration (weight, and queueMax / maxConcurrent / maxKvBlocks,
-- absent = unlimited; bucketCapacity / bucketRefill, absent = no token bucket), gauges
-- (inflight, kvBlocks, waiting), bucket state (bucketLevel in milli-tokens, bucketAt;
-- absent = full), budgets and rates with their window counters (includes/limits.lua), and
-- outMean, its mean output per request in thousandths of a token (fairness in tokens,
-- includes/service.lua; absent before its first sample).
local TENANT_FIELDS = { 'weight', 'queueMax', 'maxConcurrent', 'maxKvBlocks', 'inflight',
  'kvBlocks', 'waiting', 'bucketCapacity', 'bucketRefill', 'bucketLevel', 'bucketAt',
  'outMean' }
-- The same, with the budgets and rates and their counters as fields 12-20 of the row.
local TENANT_AND_LIMIT_FIELDS = { 'weight', 'queueMax', 'maxConcurrent', 'maxKvBlocks',
  'inflight', 'kvBlocks', 'waiting', 'bucketCapacity', 'bucketRefill', 'bucketLevel',
  'bucketAt', 'tokensPerDay', 'tokensPerMonth', 'requestsPerMinute', 'minuteId',
  'minuteRequests', 'dayId', 'dayTokens', 'monthId', 'monthTokens', 'outMean' }

-- A tenant, nil when unknown. withLimits: also its budgets and rates, in one read; `limitRow`
-- is then the row (for loadLimits) when it has any, else nil.
local function loadTenant(tenant, withLimits)
  local tenantKey = tenantPrefix .. tenant
  local raw = rcall('HMGET', tenantKey,
    unpack(withLimits and TENANT_AND_LIMIT_FIELDS or TENANT_FIELDS))
  if not raw[1] then return nil end
  return {
    weight = tonumber(raw[1]),
    queueMax = tonumber(raw[2]),
    maxConcurrent = tonumber(raw[3]),
    maxKvBlocks = tonumber(raw[4]),
    inflight = tonumber(raw[5]) or 0,
    kvBlocks = tonumber(raw[6]) or 0,
    waiting = tonumber(raw[7]) or 0,
    bucketCapacity = tonumber(raw[8]),
    bucketRefill = tonumber(raw[9]),
    bucketLevel = tonumber(raw[10]),
    bucketAt = tonumber(raw[11]),
    outMean = tonumber(raw[withLimits and 21 or 12]),
    limitRow = (withLimits and (raw[12] or raw[13] or raw[14])) and raw or nil,
  }
end

-- Whether granting one more request needing kvBlocks would break a tenant quota.
local function tenantAtQuota(tenant, kvBlocks)
  if tenant.maxConcurrent and tenant.inflight >= tenant.maxConcurrent then return true end
  if tenant.maxKvBlocks and tenant.kvBlocks + kvBlocks > tenant.maxKvBlocks then return true end
  return false
end
