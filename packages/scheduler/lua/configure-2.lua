#!lua
--[[
  Writes the pool settings (validated by the caller) and sets the budget only if none is
  set yet: the controller owns the budget once it runs, and a replica restarting with its
  config file must not reset it.

  Input:
    KEYS[1] config hash
    KEYS[2] ctl hash
    ARGV[1] the settings: a JSON object of config-hash field -> encoded value (string), one
            per row of the settings table (packages/core/src/scheduler-settings.ts; built by
            encodeSettings in src/redis/settings-hash.ts)
    ARGV[2] hash of the writer's config (which config version the pool's settings came from)
    ARGV[3] mode: 'replace' (start, reload) | 'seed' (restore lost state only)

  Output:
    the budget in force
]]
local rcall = redis.call
local configKey = KEYS[1]
local ctlKey = KEYS[2]

if ARGV[3] == 'seed' and rcall('HEXISTS', configKey, 'fairness') == 1 then
  return tonumber(rcall('HGET', ctlKey, 'budget'))
end

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
rcall('HSETNX', ctlKey, 'budget', settings.initialBudget)
return tonumber(rcall('HGET', ctlKey, 'budget'))
