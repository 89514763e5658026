#!lua flags=no-writes
--[[
  Merges the TTFT histogram counts of the last N server seconds, the current one included.

  Input:
    KEYS[1] latency key prefix (lat:)
    ARGV[1] window length in seconds

  Output:
    {bucket, count, bucket, count, ...} summed over the window
]]
local rcall = redis.call
local latencyPrefix = KEYS[1]
--- @include "includes/serverTime"

local current = math.floor(serverNowMs() / 1000)
local merged, order = {}, {}
for second = current - tonumber(ARGV[1]) + 1, current do
  local latencyKey = latencyPrefix .. second
  local flat = rcall('HGETALL', latencyKey)
  for i = 1, #flat, 2 do
    local bucket = flat[i]
    if not merged[bucket] then order[#order + 1] = bucket; merged[bucket] = 0 end
    merged[bucket] = merged[bucket] + tonumber(flat[i + 1])
  end
end
local out = {}
for _, bucket in ipairs(order) do
  out[#out + 1] = bucket
  out[#out + 1] = merged[bucket]
end
return out
