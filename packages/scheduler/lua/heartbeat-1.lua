#!lua
--[[
  Proves a replica alive for another lease TTL and extends the leases of the granted
  requests it names. Ids that are no longer live requests of this replica are returned as
  lost: the replica must abort them (their lease lapsed, or the replica was reclaimed).

  Input:
    KEYS[1]  the pool's tag {fg:<pool>}: (includes/engineKeys.lua derives every key)
    ARGV[1]      replica
    ARGV[2..n]   request ids the replica holds (granted or waiting)

  Output:
    {lostId, ...}
    Code.NotConfigured
]]
local rcall = redis.call
--- @include "includes/engineKeys"
--- @include "includes/codes"
--- @include "includes/serverTime"
--- @include "includes/config"
--- @include "includes/replicas"

local cfg = loadConfig()
if not cfg then return Code.NotConfigured end
local now = serverNowMs()
local replica = ARGV[1]
touchReplica(replica, now, cfg)
local lost = {}
for i = 2, #ARGV do
  local id = ARGV[i]
  local requestKey = requestPrefix .. id
  local held = rcall('HMGET', requestKey, 'owner', 'state')
  if held[1] ~= replica then
    lost[#lost + 1] = id
  elseif held[2] == 'granted' then
    rcall('ZADD', leasesKey, 'XX', now + cfg.leaseTtlMs, id)
  end
end
return lost
