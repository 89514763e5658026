#!lua
--[[
  The leader's scrape of the pods' vLLM gauges, stamped with the server clock. Fenced: only
  the replica holding the leader lease in the current epoch writes. Pods that are not
  configured (no cap) are skipped, so a scrape never creates a pod.

  Input:
    KEYS[1] leader string
    KEYS[2] leader epoch counter
    KEYS[3] pods hash
    KEYS[4] config hash (its test clock, when it has one: includes/serverTime.lua)
    ARGV[1] replica
    ARGV[2] epoch
    ARGV[3..n] groups of 5: pod, waiting, running, KV-cache utilization, prefix capacity
               (prompt blocks its KV cache holds; '' when the pod does not say, which keeps
               the last one reported)

  Output:
    1 written, Code.StaleFence rejected (nothing written)
]]
local rcall = redis.call
local podsKey = KEYS[3]
local configKey = KEYS[4]
--- @include "includes/codes"
--- @include "includes/fence"
--- @include "includes/serverTime"

if not holdsFence(ARGV[1], ARGV[2]) then return Code.StaleFence end
useTestClock(rcall('HGET', configKey, 'testClockMs'))
local now = serverNowMs()
for i = 3, #ARGV, 5 do
  local pod = ARGV[i]
  if rcall('HEXISTS', podsKey, 'cap:' .. pod) == 1 then
    rcall('HSET', podsKey, 'waiting:' .. pod, ARGV[i + 1], 'running:' .. pod, ARGV[i + 2],
      'kv:' .. pod, ARGV[i + 3], 'scrapedAt:' .. pod, now)
    if ARGV[i + 4] ~= '' then rcall('HSET', podsKey, 'pxcap:' .. pod, ARGV[i + 4]) end
  end
end
return 1
