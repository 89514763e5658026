#!lua
--[[
  Adds one replica's usage (what the pods reported at release) to the current server hour,
  usage:<hour start, Unix seconds>: a hash of '<tenant>|<kind>|<model>' -> count, kind r
  (requests), i (input tokens), o (output tokens) or c (cached input tokens). Every replica
  adds its own counts, so the buckets are exact across replicas whatever their clocks. The
  bucket expires after the retention. Each call carries an id: a call whose id was applied
  in the last hour changes nothing, so a caller may send a flush again after a timeout
  without counting it twice.

  Input:
    KEYS[1] usage key prefix (usage:)
    ARGV[1] retention (seconds)
    ARGV[2] flush id (unique per call; the same on a retry)
    ARGV[3..n] pairs: field, count

  Output:
    the hour (Unix seconds) the counts went to
]]
local rcall = redis.call
local usagePrefix = KEYS[1]
--- @include "includes/serverTime"

local hour = math.floor(serverNowMs() / 3600000) * 3600
local flushKey = usagePrefix .. 'flush:' .. ARGV[2]
if not rcall('SET', flushKey, 1, 'NX', 'EX', 3600) then return hour end
local usageKey = usagePrefix .. hour
for i = 3, #ARGV, 2 do
  rcall('HINCRBY', usageKey, ARGV[i], ARGV[i + 1])
end
rcall('EXPIREAT', usageKey, hour + 3600 + tonumber(ARGV[1]))
return hour
