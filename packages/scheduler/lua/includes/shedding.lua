--- @include "includes/expiry"
--[[
  Queue shedding: a full queue (tenant or global) takes out the most sheddable waiting
  request below the arrival's band instead of rejecting the arrival: lowest band first, the
  newest arrival first within it (the sheddable indexes are sorted that way).
]]

-- The victim among the waiting requests of `tenantName`, or of the whole pool when nil.
-- An entry whose request is gone or no longer waiting (left by an older script version that
-- did not keep the index, during a rolling deploy) is dropped on the way.
local function shedVictim(tenantName, arrivalBand)
  while true do
    local head
    local sheddableTenantKey = sheddableByTenantPrefix .. (tenantName or '')
    if tenantName then
      head = rcall('ZRANGE', sheddableTenantKey, 0, 0)[1]
    else
      head = rcall('ZRANGE', sheddableKey, 0, 0)[1]
    end
    if not head then return nil end
    local victim = readRequest(head)
    if victim and victim.state == 'queued' then
      if tonumber(victim.band) < arrivalBand then return victim end
      return nil
    end
    if tenantName then
      rcall('ZREM', sheddableTenantKey, head)
    else
      rcall('ZREM', sheddableKey, head)
    end
  end
end

-- Outcome evicted (tokens refunded: it never had a slot), counted as shed, owner told.
local function shedWaiting(victim)
  endRequest(victim, 'evicted')
  countFlow('shed', victim.tenant, victim.class)
  notifyReplica(victim.owner, 'shed|' .. victim.id)
end
