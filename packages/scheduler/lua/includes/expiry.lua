--- @include "includes/requests"
--- @include "includes/replicas"
-- Queue TTL reached: the request leaves with outcome expired and its owner is told.
local function expireWaiting(req)
  endRequest(req, 'expired')
  notifyReplica(req.owner, 'expired|' .. req.id)
end

-- Lease lapsed without a heartbeat: the slot is reclaimed, outcome evicted, owner told.
local function evictGranted(req)
  endRequest(req, 'evicted')
  notifyReplica(req.owner, 'evict|' .. req.id)
end
