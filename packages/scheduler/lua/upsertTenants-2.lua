#!lua
--[[
  Creates or updates tenants. Gauges (inflight, kvBlocks, waiting) are left alone, so this
  is safe while the tenant has requests in flight; lowering a quota only stops new grants.
  A token bucket keeps its level while configured: an update first refills it at the old
  rate up to now, then clamps it to the new capacity; removing the bucket drops its level,
  so a bucket added again starts full. Budgets and rates (includes/limits.lua) are written
  to the tenant hash too; their window counters are left alone, so an update within a
  window keeps what was counted.

  Input:
    KEYS[1] tenants set (every configured tenant, for snapshots)
    KEYS[2] tenant hash prefix
    ARGV    groups of 10: tenant, weight, queueMax, maxConcurrent, maxKvBlocks,
            bucket capacity, bucket refill per second, tokens per day, tokens per month,
            requests per minute (a limit of '' means unlimited; a capacity of '' means no
            bucket)

  Output:
    number of tenants written
]]
local rcall = redis.call
local tenantsKey = KEYS[1]
local tenantPrefix = KEYS[2]
--- @include "includes/serverTime"
--- @include "includes/bucketRefill"

-- The limits of a group by their offset in it ('' = unlimited: the field goes).
local limitFields = { [2] = 'queueMax', [3] = 'maxConcurrent', [4] = 'maxKvBlocks',
  [7] = 'tokensPerDay', [8] = 'tokensPerMonth', [9] = 'requestsPerMinute' }
local written = 0
for i = 1, #ARGV, 10 do
  local tenant = ARGV[i]
  local tenantKey = tenantPrefix .. tenant
  rcall('HSET', tenantKey, 'weight', ARGV[i + 1])
  for offset, field in pairs(limitFields) do
    local value = ARGV[i + offset]
    if value == '' then rcall('HDEL', tenantKey, field) else rcall('HSET', tenantKey, field, value) end
  end
  if ARGV[i + 5] == '' then
    rcall('HDEL', tenantKey, 'bucketCapacity', 'bucketRefill', 'bucketLevel', 'bucketAt')
  else
    local old = rcall('HMGET', tenantKey, 'bucketCapacity', 'bucketRefill', 'bucketLevel',
      'bucketAt')
    if old[1] and old[3] then
      local level, at = refilledBucket(tonumber(old[1]), tonumber(old[2]), tonumber(old[3]),
        tonumber(old[4]), serverNowMs())
      rcall('HSET', tenantKey, 'bucketLevel', math.min(level, tonumber(ARGV[i + 5]) * 1000),
        'bucketAt', at)
    end
    rcall('HSET', tenantKey, 'bucketCapacity', ARGV[i + 5], 'bucketRefill', ARGV[i + 6])
  end
  rcall('SADD', tenantsKey, tenant)
  written = written + 1
end
return written
