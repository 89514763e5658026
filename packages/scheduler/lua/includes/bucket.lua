--- @include "includes/engineKeys"
--- @include "includes/serverTime"
--- @include "includes/codes"
--- @include "includes/bucketRefill"
--[[
  Per-tenant token bucket, the rules of src/token-bucket.ts in @fairgate/core (milli-tokens,
  server time): tenant:<t> fields bucketCapacity and bucketRefill (tokens per second; absent
  = no bucket), bucketLevel (milli-tokens) and bucketAt (ms of the last update). A bucket
  without a level is full; a lowered capacity clamps the level at the next refill.
]]

-- Takes `cost` tokens from the tenant's bucket (take in core). Returns nil when taken or not
-- charged (no bucket, or cost 0); otherwise Code.RateLimited and the retry-after in ms, nil
-- when waiting cannot help (the cost exceeds the capacity, or the bucket never refills).
-- A refusal takes nothing.
local function takeTokens(tenantName, tenant, cost, now)
  local capacity = tenant.bucketCapacity
  if not capacity or cost <= 0 then return nil end
  if cost > capacity then return Code.RateLimited, nil end
  local level, at = refilledBucket(capacity, tenant.bucketRefill, tenant.bucketLevel,
    tenant.bucketAt, now)
  local costMilli = cost * 1000
  if level < costMilli then
    if tenant.bucketRefill > 0 then
      return Code.RateLimited, math.ceil((costMilli - level) / tenant.bucketRefill)
    end
    return Code.RateLimited, nil
  end
  local tenantKey = tenantPrefix .. tenantName
  rcall('HSET', tenantKey, 'bucketLevel', level - costMilli, 'bucketAt', at)
  return nil
end

-- Credits `tokens` (negative to charge) to the tenant's bucket, capped at its capacity: a
-- refund of a request that never got a slot, or a release's true-up (trueUp in core). No-op
-- when the tenant has no bucket (any more).
local function creditTokens(tenantName, tokens)
  local tenantKey = tenantPrefix .. tenantName
  local raw = rcall('HMGET', tenantKey, 'bucketCapacity', 'bucketRefill', 'bucketLevel',
    'bucketAt')
  local capacity = tonumber(raw[1])
  if not capacity then return end
  local level, at = refilledBucket(capacity, tonumber(raw[2]), tonumber(raw[3]),
    tonumber(raw[4]), serverNowMs())
  rcall('HSET', tenantKey, 'bucketLevel', math.min(capacity * 1000, level + tokens * 1000),
    'bucketAt', at)
end
