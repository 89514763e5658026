#!lua
--[[
  Writes the pool settings (validated by the caller) and sets the budget only if none is
  set yet: the controller owns the budget once it runs, and a replica restarting with its
  config file must not reset it.

  Input:
    KEYS[1] config hash
    KEYS[2] ctl hash
    ARGV[1]  fairness: drr | round-robin | global-strict
    ARGV[2]  order: fifo | slo-deadline
    ARGV[3]  quantum
    ARGV[4]  band capacity (waiting requests per band)
    ARGV[5]  global max queue depth
    ARGV[6]  default queue TTL (ms)
    ARGV[7]  lease TTL (ms), also the replica liveness TTL
    ARGV[8]  max grants per dispatch pass
    ARGV[9]  janitor batch size
    ARGV[10] initial budget

  Output:
    the budget in force
]]
local rcall = redis.call
local configKey = KEYS[1]
local ctlKey = KEYS[2]

rcall('HSET', configKey, 'fairness', ARGV[1], 'order', ARGV[2], 'quantum', ARGV[3],
  'bandCapacity', ARGV[4], 'maxQueueDepth', ARGV[5], 'queueTtlMs', ARGV[6],
  'leaseTtlMs', ARGV[7], 'maxGrantsPerPass', ARGV[8], 'janitorBatch', ARGV[9],
  'initialBudget', ARGV[10])
rcall('HSETNX', ctlKey, 'budget', ARGV[10])
return tonumber(rcall('HGET', ctlKey, 'budget'))
