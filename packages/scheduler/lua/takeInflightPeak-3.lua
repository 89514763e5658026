#!lua
--[[
  The leader takes the pool-wide in-flight peak (the most requests in flight at once since
  the previous take; every grant raises it) and restarts it from the current in-flight.
  Fenced: a replica that no longer leads in this epoch must not reset what the current
  leader has not read yet.

  Input:
    KEYS[1] leader string
    KEYS[2] leader epoch counter
    KEYS[3] ctl hash
    ARGV[1] replica
    ARGV[2] epoch

  Output:
    the peak (>= 0), or Code.StaleFence (nothing changed)
]]
local rcall = redis.call
local ctlKey = KEYS[3]
--- @include "includes/codes"
--- @include "includes/fence"

if not holdsFence(ARGV[1], ARGV[2]) then return Code.StaleFence end
local gauges = rcall('HMGET', ctlKey, 'peakInflight', 'inflight')
local inflight = math.max(tonumber(gauges[2]) or 0, 0)
local peak = math.max(tonumber(gauges[1]) or 0, inflight)
rcall('HSET', ctlKey, 'peakInflight', inflight)
return peak
