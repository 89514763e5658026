#!lua
--[[
  The replica's tick: proves it alive, runs the janitor (cheap when nothing is due) and a
  dispatch pass, then pops the replica's notices.

  With ARGV[3] (most ms to stay quiet) the reply starts with how long the replica may skip
  its next polls (includes/quiet.lua); the caller polls again at once after its own writes
  that carry no such hint (RedisScheduler.poll).

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
--- @include "includes/quiet"

local cfg = loadConfig()
if not cfg then return Code.NotConfigured end
local now = serverNowMs()
local replica = ARGV[1]
touchReplica(replica, now, cfg)
runJanitor(now, cfg)
dispatchPass(now, cfg, nil)
local notices = popNotices(replica, tonumber(ARGV[2]))
if not ARGV[3] then return notices end
table.insert(notices, 1, quietMs(now, cfg, tonumber(ARGV[3])))
return notices
