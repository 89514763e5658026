-- tenant:<tenant> hash: configuration (weight, and queueMax / maxConcurrent / maxKvBlocks,
-- absent = unlimited; bucketCapacity / bucketRefill, absent = no token bucket), gauges
-- (inflight, kvBlocks, waiting), bucket state (bucketLevel in milli-tokens, bucketAt;
-- absent = full) and limited ('1' when limits:<tenant> holds a budget or a rate,
-- includes/limits.lua). nil for unknown tenants.
local function loadTenant(tenant)
  local tenantKey = tenantPrefix .. tenant
  local raw = rcall('HMGET', tenantKey, 'weight', 'queueMax', 'maxConcurrent', 'maxKvBlocks',
    'inflight', 'kvBlocks', 'waiting', 'bucketCapacity', 'bucketRefill', 'bucketLevel',
    'bucketAt', 'limited')
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
    limited = raw[12] == '1',
  }
end

-- Whether granting one more request needing kvBlocks would break a tenant quota.
local function tenantAtQuota(tenant, kvBlocks)
  if tenant.maxConcurrent and tenant.inflight >= tenant.maxConcurrent then return true end
  if tenant.maxKvBlocks and tenant.kvBlocks + kvBlocks > tenant.maxKvBlocks then return true end
  return false
end
