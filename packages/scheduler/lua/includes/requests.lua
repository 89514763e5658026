--- @include "includes/stats"
--[[
  req:<id> hash: tenant, band, owner (replica), class, cost, kvBlocks, hint, expiresAt
  (queue expiry), seq, state ('queued' | 'granted') and pod once granted. A request is live
  iff its hash exists; it is deleted the moment the request ends, so ids never leak.
  Gauges (in ctl): waiting = number of queued requests, waiting:<band> per band,
  tenant.waiting per tenant; inflight, tenant.inflight/kvBlocks and pods
  inflight:<pod> count granted ones. Every change below keeps them exact.
]]
local function readRequest(id)
  local requestKey = requestPrefix .. id
  local raw = rcall('HMGET', requestKey, 'state', 'tenant', 'band', 'owner', 'class', 'cost',
    'kvBlocks', 'hint', 'expiresAt', 'pod')
  if not raw[1] then return nil end
  return {
    id = id,
    state = raw[1],
    tenant = raw[2],
    band = raw[3],
    owner = raw[4],
    class = raw[5],
    cost = tonumber(raw[6]),
    kvBlocks = tonumber(raw[7]),
    hint = raw[8],
    expiresAt = tonumber(raw[9]),
    pod = raw[10],
  }
end

local function storeRequest(req, state, pod)
  local requestKey = requestPrefix .. req.id
  rcall('HSET', requestKey, 'state', state, 'tenant', req.tenant, 'band', req.band,
    'owner', req.owner, 'class', req.class, 'cost', req.cost, 'kvBlocks', req.kvBlocks,
    'hint', req.hint, 'expiresAt', req.expiresAt, 'seq', req.seq, 'pod', pod or '')
end

-- Puts a stored request into its tenant's queue and the indexes that find it again: by
-- queue expiry (janitor) and by owner (reclaim of a dead replica).
local function linkWaiting(req, score)
  local queueKey = queuePrefix .. req.band .. ':' .. req.tenant
  rcall('ZADD', queueKey, score, req.id)
  rcall('ZADD', queueDeadlinesKey, req.expiresAt, req.id)
  local waitingByReplicaKey = waitingByReplicaPrefix .. req.owner
  rcall('ZADD', waitingByReplicaKey, req.seq, req.id)
  rcall('HINCRBY', ctlKey, 'waiting', 1)
  rcall('HINCRBY', ctlKey, 'waiting:' .. req.band, 1)
  local tenantKey = tenantPrefix .. req.tenant
  rcall('HINCRBY', tenantKey, 'waiting', 1)
end

-- The inverse of linkWaiting. The tenant stays in its band's ring even when its queue is
-- now empty: the ring drops it when the pass next reaches it, so this never scans a ring.
local function unlinkWaiting(req)
  local queueKey = queuePrefix .. req.band .. ':' .. req.tenant
  rcall('ZREM', queueKey, req.id)
  rcall('ZREM', queueDeadlinesKey, req.id)
  local waitingByReplicaKey = waitingByReplicaPrefix .. req.owner
  rcall('ZREM', waitingByReplicaKey, req.id)
  rcall('HINCRBY', ctlKey, 'waiting', -1)
  rcall('HINCRBY', ctlKey, 'waiting:' .. req.band, -1)
  local tenantKey = tenantPrefix .. req.tenant
  rcall('HINCRBY', tenantKey, 'waiting', -1)
end

-- Takes the in-flight slot: the lease, global, tenant and pod counts. A lease never outlives
-- its owner's liveness: a grant made to a replica that has just gone quiet lapses when the
-- replica is declared dead, not a whole lease TTL later.
local function holdLease(req, pod, now, cfg, ownerLiveness)
  rcall('ZADD', leasesKey, math.min(now + cfg.leaseTtlMs, ownerLiveness), req.id)
  -- peakInflight: the most in flight at once since the leader last took it (the
  -- controller's "not app-limited" gate); exact, because every grant passes here.
  local inflight = rcall('HINCRBY', ctlKey, 'inflight', 1)
  if inflight > (tonumber(rcall('HGET', ctlKey, 'peakInflight')) or 0) then
    rcall('HSET', ctlKey, 'peakInflight', inflight)
  end
  local tenantKey = tenantPrefix .. req.tenant
  rcall('HINCRBY', tenantKey, 'inflight', 1)
  if req.kvBlocks > 0 then rcall('HINCRBY', tenantKey, 'kvBlocks', req.kvBlocks) end
  rcall('HINCRBY', podsKey, 'inflight:' .. pod.name, 1)
  pod.inflight = pod.inflight + 1
end

local function freeLease(req)
  rcall('ZREM', leasesKey, req.id)
  rcall('HINCRBY', ctlKey, 'inflight', -1)
  local tenantKey = tenantPrefix .. req.tenant
  rcall('HINCRBY', tenantKey, 'inflight', -1)
  if req.kvBlocks > 0 then rcall('HINCRBY', tenantKey, 'kvBlocks', -req.kvBlocks) end
  rcall('HINCRBY', podsKey, 'inflight:' .. req.pod, -1)
end

-- Ends a live request, whatever its state, with its one terminal outcome.
local function endRequest(req, outcome)
  if req.state == 'granted' then freeLease(req) else unlinkWaiting(req) end
  countFlow(outcome, req.tenant, req.class)
  local requestKey = requestPrefix .. req.id
  rcall('DEL', requestKey)
end
