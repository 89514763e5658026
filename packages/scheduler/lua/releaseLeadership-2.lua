#!lua
--[[
  Gives up the leader lease (clean shutdown), only for the holder in the current epoch, so
  another replica can lead at once instead of waiting for the lease to lapse.

  Input:
    KEYS[1] leader string
    KEYS[2] leader epoch counter
    ARGV[1] replica
    ARGV[2] epoch

  Output:
    1 released, Code.StaleFence when this replica no longer holds it
]]
local rcall = redis.call
--- @include "includes/codes"
--- @include "includes/fence"

if not holdsFence(ARGV[1], ARGV[2]) then return Code.StaleFence end
rcall('DEL', leaderKey)
return 1
