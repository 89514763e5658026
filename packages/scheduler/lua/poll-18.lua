#!lua
--[[
  The replica's tick: proves it alive, runs the janitor (cheap when nothing is due) and a
  dispatch pass, then pops the replica's notices.

  Input:
    KEYS[1..18]  the engine keyspace (includes/engineKeys.lua)
    ARGV[1]  replica
    ARGV[2]  most notices to return

  Output:
    {notice, ...}  'grant|<id>|<pod>', 'expired|<id>', 'evict|<id>', 'shed|<id>' in the
                   order they happened
    Code.NotConfigured
]]
local rcall = redis.call
--- @include "includes/engineKeys"
--- @include "includes/codes"
--- @include "includes/serverTime"
--- @include "includes/config"
--- @include "includes/dispatch"
--- @include "includes/janitor"

local cfg = loadConfig()
if not cfg then return Code.NotConfigured end
local now = serverNowMs()
local replica = ARGV[1]
touchReplica(replica, now, cfg)
runJanitor(now, cfg)
dispatchPass(now, cfg, nil)
local noticesKey = noticesPrefix .. replica
return rcall('LPOP', noticesKey, tonumber(ARGV[2])) or {}
