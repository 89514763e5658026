#!lua flags=no-writes
--[[
  A consistent read of the pool state for /admin/state, metrics and tests. O(tenants).
  Unordered: the caller sorts.

  Input:
    KEYS[1] config hash      KEYS[5] stats hash
    KEYS[2] ctl hash         KEYS[6] tenants set
    KEYS[3] pods hash        KEYS[7] tenant hash prefix
    KEYS[4] replicas zset    KEYS[8] leader string
                             KEYS[9] leader epoch counter
    KEYS[10] bands zset       KEYS[11] service counters hash (idle counters)
    KEYS[12] ring prefix (band:<band>:vtc zsets of backlogged counters)
    KEYS[13] adapters prefix (lora:<pod> hashes, includes/lora.lua)

  Output:
    { now ms, config, ctl, pods, replicas (member, score, ...), stats,
      tenants (groups of 22: tenant, weight, queueMax, maxConcurrent, maxKvBlocks,
      inflight, kvBlocks, waiting, bucketCapacity, bucketRefill, bucketLevel, bucketAt,
      tokensPerDay, tokensPerMonth, requestsPerMinute, minuteId,
      minuteRequests, dayId, dayTokens, monthId, monthTokens, outMean; '' for absent),
      leader or false, epoch or false, backlogged service counters (band, tenant, counter,
      ...), idle service counters (the hash, flat), each pod's LoRA adapters (pod, adapters
      joined by ',', ...) }
    where config/ctl/pods/stats are flat field, value lists.
]]
local rcall = redis.call
local configKey = KEYS[1]
local ctlKey = KEYS[2]
local podsKey = KEYS[3]
local replicasKey = KEYS[4]
local statsKey = KEYS[5]
local tenantsKey = KEYS[6]
local tenantPrefix = KEYS[7]
local leaderKey = KEYS[8]
local leaderEpochKey = KEYS[9]
local bandsKey = KEYS[10]
local serviceKey = KEYS[11]
local ringPrefix = KEYS[12]
local adaptersPrefix = KEYS[13]
--- @include "includes/serverTime"

-- The config first: it may carry the pool's test clock (includes/serverTime.lua).
local config = rcall('HGETALL', configKey)
for i = 1, #config, 2 do
  if config[i] == 'testClockMs' then useTestClock(config[i + 1]) end
end

local tenants = {}
for _, tenant in ipairs(rcall('SMEMBERS', tenantsKey)) do
  local tenantKey = tenantPrefix .. tenant
  local row = rcall('HMGET', tenantKey, 'weight', 'queueMax', 'maxConcurrent', 'maxKvBlocks',
    'inflight', 'kvBlocks', 'waiting', 'bucketCapacity', 'bucketRefill', 'bucketLevel',
    'bucketAt', 'tokensPerDay', 'tokensPerMonth', 'requestsPerMinute', 'minuteId',
    'minuteRequests', 'dayId', 'dayTokens', 'monthId', 'monthTokens', 'outMean')
  tenants[#tenants + 1] = tenant
  for i = 1, 21 do tenants[#tenants + 1] = row[i] or '' end
end

local backlogged = {}
for _, band in ipairs(rcall('ZRANGE', bandsKey, 0, -1)) do
  local setKey = ringPrefix .. band .. ':vtc'
  local entries = rcall('ZRANGE', setKey, 0, -1, 'WITHSCORES')
  for i = 1, #entries, 2 do
    backlogged[#backlogged + 1] = band
    backlogged[#backlogged + 1] = entries[i]
    backlogged[#backlogged + 1] = entries[i + 1]
  end
end

local pods = rcall('HGETALL', podsKey)
local adapters = {}
for i = 1, #pods, 2 do
  local pod = string.match(pods[i], '^cap:(.*)$')
  if pod then
    local adaptersKey = adaptersPrefix .. pod
    adapters[#adapters + 1] = pod
    adapters[#adapters + 1] = table.concat(rcall('HKEYS', adaptersKey), ',')
  end
end

return {
  serverNowMs(),
  config,
  rcall('HGETALL', ctlKey),
  pods,
  rcall('ZRANGE', replicasKey, 0, -1, 'WITHSCORES'),
  rcall('HGETALL', statsKey),
  tenants,
  rcall('GET', leaderKey),
  rcall('GET', leaderEpochKey),
  backlogged,
  rcall('HGETALL', serviceKey),
  adapters,
}
