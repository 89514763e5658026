#!lua
--[[
  Extends the leader lease, only for the holder in the current epoch.

  Input:
    KEYS[1] leader string
    KEYS[2] leader epoch counter
    ARGV[1] replica
    ARGV[2] epoch
    ARGV[3] lease TTL (ms)

  Output:
    1 renewed, Code.StaleFence when the lease or the epoch is no longer this replica's
]]
local rcall = redis.call
--- @include "includes/codes"
--- @include "includes/fence"

if not holdsFence(ARGV[1], ARGV[2]) then return Code.StaleFence end
rcall('PEXPIRE', leaderKey, ARGV[3])
return 1
