#!lua
--[[
  The LoRA adapters pods hold (includes/lora.lua), in one of two modes:
  - 'report' (the leader, from each pod's /v1/models and vllm:lora_requests_info): each
    named pod's hash lora:<pod> becomes the adapters listed ('0'), plus those a grant claimed
    there (claimAdapter: a gateway loads them) less than keepClaimsMs ago, which the
    leader's list may not show yet (a claim that young keeps its stamp even when listed:
    vllm:lora_requests_info lists an adapter only while a request for it runs); and its slots ('lslots:<pod>', max_lora) when given.
    Pods that are not configured (no cap) are skipped, so a report never creates a pod.
  - 'drop' (a gateway whose load of a claimed adapter failed): the pod no longer holds it.
  No dispatch pass: the next pass (a release, the poll tick) sees the change.

  Input:
    KEYS[1]  the pool's tag {fg:<pool>}: (includes/engineKeys.lua derives every key)
    ARGV[1]  'report' | 'drop'
    report:  ARGV[2] keepClaimsMs; ARGV[3..n] groups of 3: pod, slots ('' = keep the last),
             adapters joined by ',' ('' = none)
    drop:    ARGV[2] pod, ARGV[3] adapter

  Output:
    1
]]
local rcall = redis.call
--- @include "includes/engineKeys"
--- @include "includes/serverTime"
--- @include "includes/config"

if ARGV[1] == 'drop' then
  local adaptersKey = adaptersPrefix .. ARGV[2]
  rcall('HDEL', adaptersKey, ARGV[3])
  return 1
end
-- The config first: it may carry the pool's test clock (includes/serverTime.lua).
loadConfig()
local claimedSince = serverNowMs() - tonumber(ARGV[2])
for i = 3, #ARGV, 3 do
  local pod = ARGV[i]
  if rcall('HEXISTS', podsKey, 'cap:' .. pod) == 1 then
    if ARGV[i + 1] ~= '' then rcall('HSET', podsKey, 'lslots:' .. pod, ARGV[i + 1]) end
    local adaptersKey = adaptersPrefix .. pod
    local listed, order = {}, {}
    for adapter in string.gmatch(ARGV[i + 2], '[^,]+') do
      listed[adapter] = true
      order[#order + 1] = adapter
    end
    local held = rcall('HGETALL', adaptersKey)
    for j = 1, #held, 2 do
      local adapter, since = held[j], tonumber(held[j + 1])
      if not listed[adapter] and (since == 0 or since <= claimedSince) then
        rcall('HDEL', adaptersKey, adapter)
      end
    end
    -- A listed adapter keeps a young claim's stamp: the lists may drop it again (a request
    -- in flight listed it, the pod's /v1/models not yet) before the claim is old.
    for _, adapter in ipairs(order) do
      local since = rcall('HGET', adaptersKey, adapter)
      if since ~= '0' and (not since or tonumber(since) <= claimedSince) then
        rcall('HSET', adaptersKey, adapter, '0')
      end
    end
  end
end
return 1
