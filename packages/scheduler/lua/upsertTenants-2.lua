#!lua
--[[
  Creates or updates tenants. Gauges (inflight, kvBlocks, waiting) are left alone, so this
  is safe while the tenant has requests in flight; lowering a quota only stops new grants.

  Input:
    KEYS[1] tenants set (every configured tenant, for snapshots)
    KEYS[2] tenant hash prefix
    ARGV    groups of 5: tenant, weight, queueMax, maxConcurrent, maxKvBlocks
            (a limit of '' means unlimited)

  Output:
    number of tenants written
]]
local rcall = redis.call
local tenantsKey = KEYS[1]
local tenantPrefix = KEYS[2]

local limits = { 'queueMax', 'maxConcurrent', 'maxKvBlocks' }
local written = 0
for i = 1, #ARGV, 5 do
  local tenant = ARGV[i]
  local tenantKey = tenantPrefix .. tenant
  rcall('HSET', tenantKey, 'weight', ARGV[i + 1])
  for j, field in ipairs(limits) do
    local value = ARGV[i + 1 + j]
    if value == '' then rcall('HDEL', tenantKey, field) else rcall('HSET', tenantKey, field, value) end
  end
  rcall('SADD', tenantsKey, tenant)
  written = written + 1
end
return written
