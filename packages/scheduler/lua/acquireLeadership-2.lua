#!lua
--[[
  Takes the leader lease if it is free. Each new leadership increments the epoch, which
  fences every controller write (setControl-3.lua): a paused old leader holds a stale epoch.
  Asking again while holding the lease renews it and keeps the epoch.

  The epoch never goes back, even when Redis lost its data (a restart without persistence,
  a FLUSHALL, a failover to a lagging replica): every replica passes the highest epoch it
  has seen as a floor, and a new leadership starts above it. A write fenced by an epoch
  from before the loss can then never match a later leadership of the same replica.

  Input:
    KEYS[1] leader string (holder replica, PX lease)
    KEYS[2] leader epoch counter
    ARGV[1] replica
    ARGV[2] lease TTL (ms)
    ARGV[3] epoch floor: the highest epoch the caller has seen (0 when none)

  Output:
    {1, epoch}          this replica leads in epoch
    {0, epoch, holder, ms}  another replica holds the lease, for `ms` more (its PTTL), so a
                            follower can retry the moment it lapses
]]
local rcall = redis.call
local leaderKey = KEYS[1]
local leaderEpochKey = KEYS[2]
local replica = ARGV[1]

local holder = rcall('GET', leaderKey)
if holder == replica then
  rcall('PEXPIRE', leaderKey, ARGV[2])
  return { 1, tonumber(rcall('GET', leaderEpochKey)) }
end
if holder then
  return { 0, tonumber(rcall('GET', leaderEpochKey)) or 0, holder, rcall('PTTL', leaderKey) }
end
rcall('SET', leaderKey, replica, 'PX', ARGV[2])
local floor = tonumber(ARGV[3]) or 0
if (tonumber(rcall('GET', leaderEpochKey)) or 0) < floor then
  rcall('SET', leaderEpochKey, floor)
end
return { 1, rcall('INCR', leaderEpochKey) }
