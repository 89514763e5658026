#!lua
--[[
  The janitor as an operation (a leader duty; poll also runs it): reclaims expired queue
  entries, lapsed leases and dead replicas' waiting requests, then dispatches into the room
  that freed up.

  Input:
    KEYS[1]  the pool's tag {fg:<pool>}: (includes/engineKeys.lua derives every key)

  Output:
    {expired, evicted, cancelled}  how many requests each part ended
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
local report = runJanitor(now, cfg)
dispatchPass(now, cfg, nil)
return report
