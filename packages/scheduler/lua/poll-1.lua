#!lua
--[[
  The replica's tick: proves it alive, runs the janitor (cheap when nothing is due) and a
  dispatch pass, then pops the replica's notices.

  With ARGV[3] (most ms to stay quiet) the reply starts with how long the replica may skip
  its next polls: 0 unless the pass ended on the budget (in flight >= budget, something
  waits, in-flight eviction off), else the time until the earliest time-driven change
  (a queue TTL, a lease or a replica's liveness running out), at most ARGV[3]. Nothing but
  those, a release (which runs its own pass and notifies), a budget change or a new config
  can then grant or expire anything; the caller polls again at once after its own writes
  and after a notice (RedisScheduler.poll). Never quiet on a pool with a test clock.

  Input:
    KEYS[1]  the pool's tag {fg:<pool>}: (includes/engineKeys.lua derives every key)
    ARGV[1]  replica
    ARGV[2]  most notices to return
    ARGV[3]  optional: most ms to stay quiet (the reply then starts with the quiet ms)

  Output:
    {notice, ...}  'grant|<id>|<pod>', 'expired|<id>', 'evict|<id>', 'shed|<id>' in the
                   order they happened; with ARGV[3]: {quiet ms, notice, ...}
    Code.NotConfigured
]]
local rcall = redis.call
--- @include "includes/engineKeys"
--- @include "includes/codes"
--- @include "includes/serverTime"
--- @include "includes/config"
--- @include "includes/dispatch"
--- @include "includes/janitor"

-- Ms until the earliest score of a zset of expiry times (its head, WITHSCORES) is reached.
local function untilHead(head, now, quiet)
  if head[2] and tonumber(head[2]) - now < quiet then return tonumber(head[2]) - now end
  return quiet
end

local function quietMs(now, cfg, most)
  if cfg.inflightEviction or rcall('HEXISTS', configKey, 'testClockMs') == 1 then return 0 end
  local gauges = rcall('HMGET', ctlKey, 'waiting', 'inflight', 'budget')
  local waiting = tonumber(gauges[1]) or 0
  if waiting <= 0 or (tonumber(gauges[2]) or 0) < (tonumber(gauges[3]) or 0) then return 0 end
  local quiet = most
  quiet = untilHead(rcall('ZRANGE', queueDeadlinesKey, 0, 0, 'WITHSCORES'), now, quiet)
  quiet = untilHead(rcall('ZRANGE', leasesKey, 0, 0, 'WITHSCORES'), now, quiet)
  quiet = untilHead(rcall('ZRANGE', replicasKey, 0, 0, 'WITHSCORES'), now, quiet)
  return math.max(0, math.floor(quiet))
end

local cfg = loadConfig()
if not cfg then return Code.NotConfigured end
local now = serverNowMs()
local replica = ARGV[1]
touchReplica(replica, now, cfg)
runJanitor(now, cfg)
dispatchPass(now, cfg, nil)
local noticesKey = noticesPrefix .. replica
local notices = rcall('LPOP', noticesKey, tonumber(ARGV[2])) or {}
if not ARGV[3] then return notices end
table.insert(notices, 1, quietMs(now, cfg, tonumber(ARGV[3])))
return notices
