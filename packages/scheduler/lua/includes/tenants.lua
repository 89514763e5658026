-- tenant:<tenant> hash: configuration (weight, and queueMax / maxConcurrent / maxKvBlocks,
-- absent = unlimited) and gauges (inflight, kvBlocks, waiting). nil for unknown tenants.
local function loadTenant(tenant)
  local tenantKey = tenantPrefix .. tenant
  local raw = rcall('HMGET', tenantKey, 'weight', 'queueMax', 'maxConcurrent', 'maxKvBlocks',
    'inflight', 'kvBlocks', 'waiting')
  if not raw[1] then return nil end
  return {
    weight = tonumber(raw[1]),
    queueMax = tonumber(raw[2]),
    maxConcurrent = tonumber(raw[3]),
    maxKvBlocks = tonumber(raw[4]),
    inflight = tonumber(raw[5]) or 0,
    kvBlocks = tonumber(raw[6]) or 0,
    waiting = tonumber(raw[7]) or 0,
  }
end

-- Whether granting one more request needing kvBlocks would break a tenant quota.
local function tenantAtQuota(tenant, kvBlocks)
  if tenant.maxConcurrent and tenant.inflight >= tenant.maxConcurrent then return true end
  if tenant.maxKvBlocks and tenant.kvBlocks + kvBlocks > tenant.maxKvBlocks then return true end
  return false
end
