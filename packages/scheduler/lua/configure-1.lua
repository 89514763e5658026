#!lua
--[[
  Writes the pool settings (validated by the caller) and sets the budget only if none is
  set yet: the controller owns the budget once it runs, and a replica restarting with its
  config file must not reset it.

  A change of fairness unit moves the tenants waiting in each band from one unit's structure
  to the other's (a band's ring of DRR deficits, or its backlogged set of service counters:
  includes/ring.lua), in the order the old one held them, so nothing waiting is lost and
  each joins as a tenant that starts waiting does.

  Input:
    KEYS[1] the pool's tag {fg:<pool>}: (includes/engineKeys.lua derives every key)
    ARGV[1] the settings: a JSON object of config-hash field -> encoded value (string), one
            per row of the settings table (packages/core/src/scheduler-settings.ts; built by
            encodeSettings in src/redis/settings-hash.ts)
    ARGV[2] hash of the writer's config (which config version the pool's settings came from)
    ARGV[3] mode: 'replace' (start, reload) | 'seed' (restore lost state only)

  Output:
    the budget in force
]]
local rcall = redis.call
--- @include "includes/engineKeys"
--- @include "includes/ring"

-- Fairness in tokens: every ring member joins its band's backlogged set.
local function moveToServiceCounters()
  for _, band in ipairs(rcall('ZRANGE', bandsKey, 0, -1)) do
    local ringKey = ringPrefix .. band .. ':ring'
    for _, tenant in ipairs(rcall('LRANGE', ringKey, 0, -1)) do
      rcall('HDEL', deficitKey, band .. ':' .. tenant)
      joinCounters(band, tenant)
    end
    rcall('DEL', ringKey)
  end
end

-- Fairness in requests: every backlogged tenant leaves with its counter and joins the ring
-- with one turn of credit.
local function moveToRings(quantum)
  for _, band in ipairs(rcall('ZRANGE', bandsKey, 0, -1)) do
    local setKey = ringPrefix .. band .. ':vtc'
    local entries = rcall('ZRANGE', setKey, 0, -1, 'WITHSCORES')
    rcall('DEL', setKey)
    for i = 1, #entries, 2 do
      local tenant, counter = entries[i], entries[i + 1]
      rcall('HSET', serviceKey, band .. ':' .. tenant, counter, band .. ':', counter)
      local tenantKey = tenantPrefix .. tenant
      local weight = tonumber(rcall('HGET', tenantKey, 'weight')) or 1
      joinRing(band, tenant, weight * quantum)
    end
  end
end

if ARGV[3] == 'seed' and rcall('HEXISTS', configKey, 'fairness') == 1 then
  return tonumber(rcall('HGET', ctlKey, 'budget'))
end

local previousUnit = rcall('HGET', configKey, 'fairnessUnit') or 'requests'
local settings = cjson.decode(ARGV[1])
local fieldValues = { 'configHash', ARGV[2] }
for field, value in pairs(settings) do
  fieldValues[#fieldValues + 1] = field
  fieldValues[#fieldValues + 1] = value
end
rcall('HSET', configKey, unpack(fieldValues))
-- The dispatch order's field before it had three values.
rcall('HDEL', configKey, 'order')
-- A new rev on every write: the engine keeps the parsed settings while the rev is the same
-- (includes/config.lua). Server time and a counter, so a pool flushed and configured again
-- never gets a rev it had before.
local time = rcall('TIME')
rcall('HSET', configKey, 'rev',
  time[1] .. '.' .. time[2] .. '.' .. rcall('HINCRBY', configKey, 'revSeq', 1))
if settings.fairnessUnit ~= previousUnit then
  if settings.fairnessUnit == 'tokens' then moveToServiceCounters()
  else moveToRings(tonumber(settings.quantum)) end
end
rcall('HSETNX', ctlKey, 'budget', settings.initialBudget)
return tonumber(rcall('HGET', ctlKey, 'budget'))
