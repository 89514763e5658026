#!lua
--[[
  A fenced controller write: the budget and/or the controller's opaque state, accepted only
  from the replica holding the leader lease in the current epoch.

  Input:
    KEYS[1] leader string
    KEYS[2] leader epoch counter
    KEYS[3] ctl hash
    ARGV[1] replica
    ARGV[2] epoch
    ARGV[3] budget, '' to leave it
    ARGV[4] controller state (opaque string), '' to leave it

  Output:
    1 written, Code.StaleFence rejected (nothing written)
]]
local rcall = redis.call
local ctlKey = KEYS[3]
--- @include "includes/codes"
--- @include "includes/fence"

if not holdsFence(ARGV[1], ARGV[2]) then return Code.StaleFence end
if ARGV[3] ~= '' then rcall('HSET', ctlKey, 'budget', ARGV[3]) end
if ARGV[4] ~= '' then rcall('HSET', ctlKey, 'controllerState', ARGV[4]) end
return 1
