--- @include "includes/stats"
--- @include "includes/bucket"
--- @include "includes/limits"
--[[
  req:<id> hash: tenant, band, owner (replica), class, cost, kvBlocks, hint, prefix (prompt
  block hashes joined by ',', includes/prefix.lua; kept only while queued: the grant uses
  them, so a granted request's reads stay small), px (the prefix index's prediction at the
  grant: the run of the prefix the pod held) and pxk (its hashes again, kept by a grant that
  predicted a run of 2 or more; read back by a release that finds it missed), lora (the
  LoRA adapter it asks for, includes/lora.lua; '' for none), w (with fairness in tokens, the
  tenant's weight its cost was charged at, so its release trues up at the same; '' = not
  charged in tokens), expiresAt
  (queue expiry), seq, tokens (charged to the tenant's bucket, 0 = not charged), lim (what
  it reserved against its tenant's budgets, includes/limits.lua; '' = nothing), state
  ('queued' | 'granted') and pod once granted. A request is live iff its hash exists; it is
  deleted the moment the request ends, so ids never leak.
  Gauges (in ctl): waiting = number of queued requests, waiting:<band> per band,
  tenant.waiting per tenant; inflight, tenant.inflight/kvBlocks and pods
  inflight:<pod> count granted ones. Indexes of sheddable requests (bands < 0): sheddable and
  sheddable:<tenant> hold the waiting ones, evictable the granted ones. Every change below
  keeps them exact.
  Constant increments are string literals ('1', '-1'): Redis 7.0 turns every Lua number
  passed to redis.call into text with snprintf("%.17g"), ~0.25 us each (includes/stats.lua
  too; 8% of an enqueue+release pair's Redis time with the derived `offered`,
  bench:scheduler).
]]
local function readRequest(id)
  local requestKey = requestPrefix .. id
  local raw = rcall('HMGET', requestKey, 'state', 'tenant', 'band', 'owner', 'class', 'cost',
    'kvBlocks', 'hint', 'expiresAt', 'pod', 'seq', 'tokens', 'prefix', 'lim', 'w',
    'lora', 'px')
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
    seq = tonumber(raw[11]),
    tokens = tonumber(raw[12]) or 0,
    prefix = raw[13] or '',
    lim = raw[14] or '',
    w = raw[15] or '',
    adapter = raw[16] or '',
    px = raw[17],
  }
end

local function storeRequest(req, state, pod)
  local requestKey = requestPrefix .. req.id
  rcall('HSET', requestKey, 'state', state, 'tenant', req.tenant, 'band', req.band,
    'owner', req.owner, 'class', req.class, 'cost', req.cost, 'kvBlocks', req.kvBlocks,
    'hint', req.hint, 'expiresAt', req.expiresAt, 'seq', req.seq, 'tokens', req.tokens,
    'pod', pod or '', 'prefix', state == 'queued' and req.prefix or '', 'lim', req.lim, 'w', req.w or '',
    'lora', req.adapter or '')
end

-- Score in the shedding and eviction indexes (sheddableScore in src/local/engine.ts): the
-- lowest band first, then the highest sequence (the newest) first. Exact in a double for
-- bands >= -1000 and sequences < 2^43.
local SHEDDABLE_BAND_STRIDE = 8796093022208
local function sheddableScore(band, seq)
  return band * SHEDDABLE_BAND_STRIDE - seq
end

-- Puts a stored request into its tenant's queue and the indexes that find it again: by
-- queue expiry (janitor), by owner (reclaim of a dead replica) and, for bands < 0, by
-- sheddability (queue shedding).
local function linkWaiting(req, score)
  local queueKey = queuePrefix .. req.band .. ':' .. req.tenant
  rcall('ZADD', queueKey, score, req.id)
  rcall('ZADD', queueDeadlinesKey, req.expiresAt, req.id)
  local waitingByReplicaKey = waitingByReplicaPrefix .. req.owner
  rcall('ZADD', waitingByReplicaKey, req.seq, req.id)
  rcall('HINCRBY', ctlKey, 'waiting', '1')
  rcall('HINCRBY', ctlKey, 'waiting:' .. req.band, '1')
  local tenantKey = tenantPrefix .. req.tenant
  rcall('HINCRBY', tenantKey, 'waiting', '1')
  local band = tonumber(req.band)
  if band < 0 then
    local shedScore = sheddableScore(band, req.seq)
    rcall('ZADD', sheddableKey, shedScore, req.id)
    local sheddableTenantKey = sheddableByTenantPrefix .. req.tenant
    rcall('ZADD', sheddableTenantKey, shedScore, req.id)
  end
end

-- The inverse of linkWaiting. The tenant stays in its band's ring even when its queue is
-- now empty: the ring drops it when the pass next reaches it, so this never scans a ring.
local function unlinkWaiting(req)
  local queueKey = queuePrefix .. req.band .. ':' .. req.tenant
  rcall('ZREM', queueKey, req.id)
  rcall('ZREM', queueDeadlinesKey, req.id)
  local waitingByReplicaKey = waitingByReplicaPrefix .. req.owner
  rcall('ZREM', waitingByReplicaKey, req.id)
  rcall('HINCRBY', ctlKey, 'waiting', '-1')
  rcall('HINCRBY', ctlKey, 'waiting:' .. req.band, '-1')
  local tenantKey = tenantPrefix .. req.tenant
  rcall('HINCRBY', tenantKey, 'waiting', '-1')
  if tonumber(req.band) < 0 then
    rcall('ZREM', sheddableKey, req.id)
    local sheddableTenantKey = sheddableByTenantPrefix .. req.tenant
    rcall('ZREM', sheddableTenantKey, req.id)
  end
end

-- Takes the in-flight slot: the lease, global, tenant and pod counts, and for bands < 0 the
-- eviction index (by grant order). A lease never outlives its owner's liveness: a grant made
-- to a replica that has just gone quiet lapses when the replica is declared dead, not a
-- whole lease TTL later.
-- gauges.peakInflight is ctl.peakInflight as the caller read it (with the gauges it reads
-- anyway, so a grant costs no HGET), kept current here.
local function holdLease(req, pod, now, cfg, ownerLiveness, gauges)
  rcall('ZADD', leasesKey, math.min(now + cfg.leaseTtlMs, ownerLiveness), req.id)
  -- peakInflight: the most in flight at once since the leader last took it (the
  -- controller's "not app-limited" gate); exact, because every grant passes here.
  local inflight = rcall('HINCRBY', ctlKey, 'inflight', '1')
  if inflight > gauges.peakInflight then
    rcall('HSET', ctlKey, 'peakInflight', inflight)
    gauges.peakInflight = inflight
  end
  local tenantKey = tenantPrefix .. req.tenant
  rcall('HINCRBY', tenantKey, 'inflight', '1')
  if req.kvBlocks > 0 then rcall('HINCRBY', tenantKey, 'kvBlocks', req.kvBlocks) end
  rcall('HINCRBY', podsKey, 'inflight:' .. pod.name, '1')
  pod.inflight = pod.inflight + 1
  local band = tonumber(req.band)
  if band < 0 then
    local grantSeq = rcall('HINCRBY', ctlKey, 'grantSeq', '1')
    rcall('ZADD', evictableKey, sheddableScore(band, grantSeq), req.id)
  end
end

local function freeLease(req)
  rcall('ZREM', leasesKey, req.id)
  rcall('HINCRBY', ctlKey, 'inflight', '-1')
  local tenantKey = tenantPrefix .. req.tenant
  rcall('HINCRBY', tenantKey, 'inflight', '-1')
  if req.kvBlocks > 0 then rcall('HINCRBY', tenantKey, 'kvBlocks', -req.kvBlocks) end
  rcall('HINCRBY', podsKey, 'inflight:' .. req.pod, '-1')
  if tonumber(req.band) < 0 then rcall('ZREM', evictableKey, req.id) end
end

-- Ends a live request, whatever its state, with its one terminal outcome. A request that
-- ends while waiting never had a slot: its bucket tokens and its budget reservation go back.
local function endRequest(req, outcome)
  if req.state == 'granted' then
    freeLease(req)
  else
    unlinkWaiting(req)
    if req.tokens > 0 then creditTokens(req.tenant, req.tokens) end
    if req.lim ~= '' then settleLimits(req.tenant, req.lim, 0) end
  end
  countFlow(outcome, req.tenant, req.class)
  local requestKey = requestPrefix .. req.id
  rcall('DEL', requestKey)
end
