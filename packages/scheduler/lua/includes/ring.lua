--- @include "includes/tenants"
--- @include "includes/expiry"
--- @include "includes/bytes"
--- @include "includes/service"
--- @include "includes/lora"
--[[
  One band's ring: list band:<band>:ring of tenants, DRR deficits in the deficit hash under
  '<band>:<tenant>' (present iff the tenant is in the ring). These functions take the
  steps of FlowRing in @fairgate/core, whose comment states the invariants (selectFlow
  takes a lone flow's turns at once, to the same state); the conformance suite holds both
  implementations to the same dispatch order, the differential test to the same state.
]]
local function joinRing(band, tenant, turnCredit)
  if rcall('HSETNX', deficitKey, band .. ':' .. tenant, turnCredit) == 1 then
    local ringKey = ringPrefix .. band .. ':ring'
    if rcall('RPUSH', ringKey, tenant) == 1 then rcall('ZADD', bandsKey, band, band) end
  end
end

local function leaveRing(band, tenant)
  local ringKey = ringPrefix .. band .. ':ring'
  rcall('LREM', ringKey, 1, tenant)
  rcall('HDEL', deficitKey, band .. ':' .. tenant)
  if rcall('LLEN', ringKey) == 0 then rcall('ZREM', bandsKey, band) end
end

-- Looks at a tenant's queue: heads past their queue TTL are expired and heads whose owner
-- stopped heartbeating are cancelled on the way. Returns 'empty', 'blocked' (tenant at a
-- quota, or its head waits for its LoRA adapter: lora.lua) or 'ready' with the head request, its queue score and the tenant. A ready head
-- carries queueHasMore (whether another request waits behind it): the queue's first two
-- members are read in one command, so a grant needs no ZCARD to know whether the flow
-- leaves its ring (a pass touches the queue of the flow it grants from only through this
-- probe).
local function probeFlow(band, tenantName, now)
  local queueKey = queuePrefix .. band .. ':' .. tenantName
  while true do
    local head = rcall('ZRANGE', queueKey, 0, 1, 'WITHSCORES')
    if not head[1] then return 'empty' end
    local req = readRequest(head[1])
    req.queueHasMore = head[3] ~= nil
    if req.expiresAt <= now then
      expireWaiting(req)
    else
      req.ownerLiveness = replicaLiveness(req.owner, now)
      if not req.ownerLiveness then
        endRequest(req, 'cancelled')
      else
        local tenant = loadTenant(tenantName)
        if tenantAtQuota(tenant, req.kvBlocks) or adapterWaits(req) then return 'blocked' end
        return 'ready', req, tonumber(head[2]), tenant
      end
    end
  end
end

-- Whether order key (score, id) a comes before b, as sorted sets order members.
local function orderKeyLess(aScore, aId, bScore, bId)
  return aScore < bScore or (aScore == bScore and bytesLess(aId, bId))
end

-- global-strict (and dispatchOrder fifo): the earliest head (score, then id) among the
-- band's unblocked tenants, and its score.
local function selectEarliest(band, now)
  local ringKey = ringPrefix .. band .. ':ring'
  local best, bestScore = nil, nil
  for _, tenantName in ipairs(rcall('LRANGE', ringKey, 0, -1)) do
    local state, req, score = probeFlow(band, tenantName, now)
    if state == 'empty' then
      leaveRing(band, tenantName)
    elseif state == 'ready' then
      if not best or orderKeyLess(score, req.id, bestScore, best.id) then
        best, bestScore = req, score
      end
    end
  end
  return best, bestScore
end

-- The band's backlogged tenant with the smallest counter whose head is ready; its head
-- request, which carries the tenant's weight (for the charge). O(skipped tenants).
local function selectByService(band, now)
  local setKey = ringPrefix .. band .. ':vtc'
  local offset = 0
  while true do
    local entry = rcall('ZRANGE', setKey, offset, offset, 'WITHSCORES')
    local tenantName = entry[1]
    if not tenantName then return nil end
    local state, req, _, tenant = probeFlow(band, tenantName, now)
    if state == 'empty' then
      leaveCounters(band, tenantName, entry[2])
    elseif state == 'blocked' then
      offset = offset + 1
    else
      req.weight = tenant.weight
      return req
    end
  end
end

-- The tenant's queue in the band got its first request: it joins the band's ring (DRR), or
-- its backlogged set (fairness in tokens).
local function joinFlow(band, tenant, turnCredit, cfg)
  if cfg.fairnessUnit == 'tokens' then joinCounters(band, tenant) else joinRing(band, tenant, turnCredit) end
end

-- The next request to dispatch from the band, or nil when the ring is empty or every
-- member is blocked. O(skipped flows): see FlowRing.select.
local function selectFlow(band, now, cfg)
  if cfg.fairnessUnit == 'tokens' then return selectByService(band, now) end
  if cfg.fairness == 'global-strict' then return (selectEarliest(band, now)) end
  local ringKey = ringPrefix .. band .. ':ring'
  local blockedInARow = 0
  while true do
    -- The ring's first two members: its head, and whether the head is alone. Its length is
    -- read only once a flow was blocked (nothing is blocked on the common path).
    local front = rcall('LRANGE', ringKey, 0, 1)
    local tenantName = front[1]
    if not tenantName then
      rcall('ZREM', bandsKey, band)
      return nil
    end
    local alone = front[2] == nil
    if blockedInARow > 0 and blockedInARow >= rcall('LLEN', ringKey) then return nil end
    local state, req, _, tenant = probeFlow(band, tenantName, now)
    if state == 'empty' then
      leaveRing(band, tenantName)
    elseif state == 'blocked' then
      rcall('LMOVE', ringKey, ringKey, 'LEFT', 'RIGHT')
      blockedInARow = blockedInARow + 1
    else
      local field = band .. ':' .. tenantName
      local deficit = tonumber(rcall('HGET', deficitKey, field)) or 0
      if cfg.fairness == 'drr' and deficit < req.cost then
        local credit = tenant.weight * cfg.quantum
        if alone then
          -- Alone in its ring, every turn comes back to this flow with the same head and
          -- nothing else changed: the turns it would take one by one (a rotation that moves
          -- nothing, a credit, the same probe again) end in the state of the credits it
          -- needs taken at once. ~8 commands less per grant of a band with one tenant.
          rcall('HINCRBY', deficitKey, field, credit * math.ceil((req.cost - deficit) / credit))
          return req
        end
        -- End of this tenant's turn: to the back, holding the credit of its next turn.
        rcall('LMOVE', ringKey, ringKey, 'LEFT', 'RIGHT')
        rcall('HINCRBY', deficitKey, field, credit)
        blockedInARow = 0
      else
        return req
      end
    end
  end
end

-- Books a dispatch from the tenant's queue (see FlowRing.charge, ServiceCounters.charge).
-- weight: the tenant's, with fairness in tokens (selectByService put it on the request).
local function chargeFlow(band, tenantName, cost, cfg, queueEmptyNow, weight)
  if cfg.fairnessUnit == 'tokens' then
    local setKey = ringPrefix .. band .. ':vtc'
    local counter = rcall('ZINCRBY', setKey, virtualCost(cost, weight), tenantName)
    if queueEmptyNow then leaveCounters(band, tenantName, counter) end
  elseif queueEmptyNow then
    leaveRing(band, tenantName)
  elseif cfg.fairness == 'drr' then
    rcall('HINCRBY', deficitKey, band .. ':' .. tenantName, -cost)
  elseif cfg.fairness == 'round-robin' then
    local ringKey = ringPrefix .. band .. ':ring'
    rcall('LMOVE', ringKey, ringKey, 'LEFT', 'RIGHT')
  end
end
