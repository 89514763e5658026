#!lua
--[[
  Writes the pool settings (validated by the caller) and sets the budget only if none is
  set yet: the controller owns the budget once it runs, and a replica restarting with its
  config file must not reset it.

  Input:
    KEYS[1] config hash
    KEYS[2] ctl hash
    ARGV[1]  fairness: drr | round-robin | global-strict
    ARGV[2]  dispatch order: priority | fifo | slo-deadline
    ARGV[3]  quantum
    ARGV[4]  band capacity (waiting requests per band)
    ARGV[5]  global max queue depth
    ARGV[6]  default queue TTL (ms)
    ARGV[7]  lease TTL (ms), also the replica liveness TTL
    ARGV[8]  max grants per dispatch pass
    ARGV[9]  janitor batch size
    ARGV[10] initial budget
    ARGV[11] admission policy: always-admit | tier-shed | gaie-legacy | reject-all
    ARGV[12] tier-shed threshold
    ARGV[13] tier-shed minimum priority
    ARGV[14] saturation queue depth threshold
    ARGV[15] saturation KV-cache utilization threshold
    ARGV[16] saturation staleness (ms)
    ARGV[17] gating enabled ('1' | '0')
    ARGV[18] gating default ceiling
    ARGV[19] gating band ceilings (JSON object band -> ceiling)
    ARGV[20] queue shedding ('1' | '0')
    ARGV[21] in-flight eviction ('1' | '0')
    ARGV[22] hash of the writer's config (which config version the pool's settings came from)
    ARGV[23] mode: 'replace' (start, reload) | 'seed' (restore lost state only)
    ARGV[24] prefix-aware pod choice ('1' | '0')
    ARGV[25] prefix weight
    ARGV[26] prefix pressure weight
    ARGV[27] prefix index entries per pod
    ARGV[28] prefix index generation TTL (ms)

  Output:
    the budget in force
]]
local rcall = redis.call
local configKey = KEYS[1]
local ctlKey = KEYS[2]

if ARGV[23] == 'seed' and rcall('HEXISTS', configKey, 'fairness') == 1 then
  return tonumber(rcall('HGET', ctlKey, 'budget'))
end

rcall('HSET', configKey, 'fairness', ARGV[1], 'dispatchOrder', ARGV[2], 'quantum', ARGV[3],
  'bandCapacity', ARGV[4], 'maxQueueDepth', ARGV[5], 'queueTtlMs', ARGV[6],
  'leaseTtlMs', ARGV[7], 'maxGrantsPerPass', ARGV[8], 'janitorBatch', ARGV[9],
  'initialBudget', ARGV[10], 'admissionPolicy', ARGV[11], 'tierShedThreshold', ARGV[12],
  'tierShedMinPriority', ARGV[13], 'queueDepthThreshold', ARGV[14],
  'kvCacheUtilThreshold', ARGV[15], 'staleMs', ARGV[16], 'gatingEnabled', ARGV[17],
  'gatingDefaultCeiling', ARGV[18], 'gatingBandCeilings', ARGV[19], 'queueShedding', ARGV[20],
  'inflightEviction', ARGV[21], 'configHash', ARGV[22], 'prefixEnabled', ARGV[24],
  'prefixWeight', ARGV[25], 'prefixPressureWeight', ARGV[26], 'prefixEntriesPerPod', ARGV[27],
  'prefixTtlMs', ARGV[28])
-- The dispatch order's field before it had three values.
rcall('HDEL', configKey, 'order')
-- A new rev on every write: the engine keeps the parsed settings while the rev is the same
-- (includes/config.lua). Server time and a counter, so a pool flushed and configured again
-- never gets a rev it had before.
local time = rcall('TIME')
rcall('HSET', configKey, 'rev',
  time[1] .. '.' .. time[2] .. '.' .. rcall('HINCRBY', configKey, 'revSeq', 1))
rcall('HSETNX', ctlKey, 'budget', ARGV[10])
return tonumber(rcall('HGET', ctlKey, 'budget'))
