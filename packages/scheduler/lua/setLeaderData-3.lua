#!lua
--[[
  A fenced write of one field of the leader's durable state (e.g. the capacity tuner's
  JSON), so a new leader continues from it. Read back with a plain HGET.

  Input:
    KEYS[1] leader string
    KEYS[2] leader epoch counter
    KEYS[3] leaderData hash
    ARGV[1] replica
    ARGV[2] epoch
    ARGV[3] field
    ARGV[4] value (opaque string)

  Output:
    1 written, Code.StaleFence rejected (nothing written)
]]
local rcall = redis.call
local leaderDataKey = KEYS[3]
--- @include "includes/codes"
--- @include "includes/fence"

if not holdsFence(ARGV[1], ARGV[2]) then return Code.StaleFence end
rcall('HSET', leaderDataKey, ARGV[3], ARGV[4])
return 1
