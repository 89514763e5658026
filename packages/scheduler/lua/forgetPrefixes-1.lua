#!lua
--[[
  Drops pods' prefix indexes (includes/prefix.lua): the pods restarted, so their KV caches
  hold none of what the index says. Idempotent.

  Input:
    KEYS[1]  the pool's tag {fg:<pool>}: (includes/engineKeys.lua derives every key)
    ARGV     pod names

  Output:
    number of index keys deleted
]]
local rcall = redis.call
--- @include "includes/engineKeys"

local deleted = 0
for _, pod in ipairs(ARGV) do
  local currentKey = prefixCurrentPrefix .. pod
  local previousKey = prefixPreviousPrefix .. pod
  deleted = deleted + rcall('DEL', currentKey) + rcall('DEL', previousKey)
end
return deleted
