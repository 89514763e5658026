#!lua
--[[
  Fenced: the leader's write of the pods a discovery source lists (DNS, Kubernetes;
  docs/architecture.md, *Who writes the pod set*). Pods of the config are upsertPods's and
  never touched here: this script keeps the set of the pods it wrote (KEYS[4]).

  A listed pod joins with its cap, the health the leader's first check found and no request
  in flight, or comes back if it was leaving; its cap follows the listing. Its health is
  then the replicas' checks' (setPodHealth), which a sync does not overwrite.

  A discovered pod no longer listed leaves: 'leaving:<pod>' is set and its health is 0, so
  it gets no new grant and no longer counts toward the budget, and its prefix index and
  its LoRA adapters (includes/lora.lua) are dropped. Its requests in flight finish (or the janitor reclaims them). Once it holds none,
  every field of it is deleted: a release can no longer name it.

  Input:
    KEYS[1] leader string
    KEYS[2] leader epoch counter
    KEYS[3] pods hash
    KEYS[4] discovered pods set
    KEYS[5] prefix index prefix, current generation (pxc:<pod>, includes/prefix.lua)
    KEYS[6] prefix index prefix, previous generation (pxo:<pod>)
    KEYS[7] LoRA adapters prefix (lora:<pod>, includes/lora.lua)
    ARGV[1] replica
    ARGV[2] epoch
    ARGV[3..n] groups of 3: pod, cap, healthy ('1' | '0')

  Output:
    1 written, Code.StaleFence rejected (nothing written)
]]
local rcall = redis.call
local podsKey = KEYS[3]
local discoveredKey = KEYS[4]
local prefixCurrentPrefix = KEYS[5]
local prefixPreviousPrefix = KEYS[6]
local adaptersPrefix = KEYS[7]
--- @include "includes/codes"
--- @include "includes/fence"

if not holdsFence(ARGV[1], ARGV[2]) then return Code.StaleFence end

local listed = {}
for i = 3, #ARGV, 3 do
  local pod = ARGV[i]
  listed[pod] = true
  local known = rcall('SADD', discoveredKey, pod) == 0
  if not known or rcall('HDEL', podsKey, 'leaving:' .. pod) == 1 then
    rcall('HSET', podsKey, 'healthy:' .. pod, ARGV[i + 2])
  end
  rcall('HSET', podsKey, 'cap:' .. pod, ARGV[i + 1])
  rcall('HSETNX', podsKey, 'inflight:' .. pod, 0)
end

for _, pod in ipairs(rcall('SMEMBERS', discoveredKey)) do
  if not listed[pod] then
    if rcall('HSETNX', podsKey, 'leaving:' .. pod, 1) == 1 then
      rcall('HSET', podsKey, 'healthy:' .. pod, 0)
      local currentKey = prefixCurrentPrefix .. pod
      local previousKey = prefixPreviousPrefix .. pod
      local adaptersKey = adaptersPrefix .. pod
      rcall('DEL', currentKey)
      rcall('DEL', previousKey)
      rcall('DEL', adaptersKey)
    end
    if (tonumber(rcall('HGET', podsKey, 'inflight:' .. pod)) or 0) <= 0 then
      rcall('HDEL', podsKey, 'cap:' .. pod, 'healthy:' .. pod, 'inflight:' .. pod,
        'leaving:' .. pod, 'waiting:' .. pod, 'running:' .. pod, 'kv:' .. pod,
        'scrapedAt:' .. pod, 'pxcap:' .. pod, 'lslots:' .. pod)
      rcall('SREM', discoveredKey, pod)
    end
  end
end
return 1
