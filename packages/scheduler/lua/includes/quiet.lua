--- @include "includes/config"
--[[
  How long a replica may skip its polls after this call (poll-1.lua, release-1.lua, when
  asked): 0 unless the pool waits on a full budget (something waits, in flight >= budget,
  in-flight eviction off), else the time until the earliest time-driven change (a queue
  TTL, a lease or a replica's liveness running out), at most `most`. In that state nothing
  but those, a release, a budget change or a new config can grant or expire anything, and
  each of those runs its own pass and notifies (RedisScheduler.setControl and configure run
  one after their write). Never quiet on a pool with a test clock. Called after
  the call's own dispatch pass; cfg and now may be nil (loaded only when the pool waits on
  a full budget, the config first: it may carry the test clock).
]]

-- Ms until the earliest score of a zset of expiry times (its head, WITHSCORES) is reached.
local function untilHead(head, now, quiet)
  if head[2] and tonumber(head[2]) - now < quiet then return tonumber(head[2]) - now end
  return quiet
end

local function quietMs(now, cfg, most)
  local gauges = rcall('HMGET', ctlKey, 'waiting', 'inflight', 'budget')
  local waiting = tonumber(gauges[1]) or 0
  if waiting <= 0 or (tonumber(gauges[2]) or 0) < (tonumber(gauges[3]) or 0) then return 0 end
  -- A cfg the caller passed was loaded by this same call, so onTestClock() is known either way.
  cfg = cfg or loadConfig()
  if not cfg or cfg.inflightEviction or onTestClock() then return 0 end
  now = now or serverNowMs()
  local quiet = most
  quiet = untilHead(rcall('ZRANGE', queueDeadlinesKey, 0, 0, 'WITHSCORES'), now, quiet)
  quiet = untilHead(rcall('ZRANGE', leasesKey, 0, 0, 'WITHSCORES'), now, quiet)
  quiet = untilHead(rcall('ZRANGE', replicasKey, 0, 0, 'WITHSCORES'), now, quiet)
  return math.max(0, math.floor(quiet))
end
