#!lua
--[[
  Adds one replica's TTFT histogram counts to the current server second, lat:<second>, which
  expires after the retention, so windows are merged across replicas without clock skew.

  Input:
    KEYS[1] latency key prefix (lat:)
    ARGV[1] retention (ms)
    ARGV[2..n] pairs: bucket index, count

  Output:
    the server second the counts went to
]]
local rcall = redis.call
local latencyPrefix = KEYS[1]
--- @include "includes/serverTime"

local second = math.floor(serverNowMs() / 1000)
local latencyKey = latencyPrefix .. second
for i = 2, #ARGV, 2 do
  rcall('HINCRBY', latencyKey, ARGV[i], ARGV[i + 1])
end
rcall('PEXPIRE', latencyKey, ARGV[1])
return second
