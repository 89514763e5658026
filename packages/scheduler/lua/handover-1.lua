#!lua
--[[
  Slot recycling (docs/scheduler.md, *Slot recycling*): a finished request's slot passes to
  the same replica's next request of the same tenant and band, which its replica
  has already sent to the slot's pod. In one step the finished request ends with its
  outcome and usage (as release-1.lua ends it) and the next one is admitted and holds the
  slot: the lease moves from one id to the other, and the global, tenant and pod in-flight
  counts stay as they are, so no budget, quota or pod cap is ever exceeded. No dispatch pass
  runs: the slot never was free.

  Nothing happens (reply 0) unless the finished request is a live granted request of that
  replica with the same tenant and band, not charged to a token bucket, in a band >= 0 (a
  sheddable one sits in the eviction index by grant order), with the same KV blocks when the
  tenant has a KV-block quota (else the tenant's KV-block gauge follows the change), and the
  next id is not live; the caller then releases the one and enqueues the other.

  Fairness in tokens (includes/service.lua): the finished request's charge is trued up to its
  usage, as release-1.lua does, and the next one is charged its estimate, made with the
  tenant's mean output after that usage.

  A tenant with a budget or a rate (includes/limits.lua): the finished request's
  reservation is trued up to its usage, as release-1.lua does, and the next one counts in
  its minute and reserves its estimate. It is not refused: it already runs on the pod, so the
  caller recycles a limited tenant's slots only while its last standing shows a margin
  (slot/slot-recycler.ts); the reply carries the standing after this request.

  The reply says whether the slot should go back to the pool instead of being recycled
  again: a request waits, more is in flight than the budget, the tenant is over a quota, the
  pod is unhealthy or over its cap, the admission policy would refuse the request, or its
  band's gate is closed.

  Input:
    KEYS[1]  the pool's tag {fg:<pool>}: (includes/engineKeys.lua derives every key)
    ARGV[1]  finished request id
    ARGV[2]  its outcome: completed | cancelled | evicted | upstream_error
    ARGV[3]  its input tokens used, '' if unknown
    ARGV[4]  its output tokens used, '' if unknown
    ARGV[5]  next request id
    ARGV[6]  tenant
    ARGV[7]  band (integer >= 0)
    ARGV[8]  owner replica
    ARGV[9]  SLO class (counter label)
    ARGV[10] cost (DRR units, integer >= 1)
    ARGV[11] KV blocks (integer >= 0)
    ARGV[12] token estimate reserved against the tenant's budgets (integer >= 0; '' = 0)
    ARGV[13] input tokens and ARGV[14] max_tokens of the next request (as enqueue-1.lua's
             ARGV[14] and ARGV[15])

  Output:
    {1, pod, contended}  handed over (contended: 1 when the slot should go back, else 0);
                         for a limited tenant followed by the 6 of its standing
                         (appendStanding)
    0                    nothing done
    Code.NotConfigured
]]
local rcall = redis.call
--- @include "includes/engineKeys"
--- @include "includes/codes"
--- @include "includes/serverTime"
--- @include "includes/config"
--- @include "includes/pods"
--- @include "includes/saturation"
--- @include "includes/admission"
--- @include "includes/replicas"
--- @include "includes/requests"
--- @include "includes/tenants"
--- @include "includes/service"

local cfg = loadConfig()
if not cfg then return Code.NotConfigured end
local now = serverNowMs()

local from = readRequest(ARGV[1])
local nextId = ARGV[5]
local nextKey = requestPrefix .. nextId
local band = tonumber(ARGV[7])
if not from or from.state ~= 'granted' or from.owner ~= ARGV[8] or from.tenant ~= ARGV[6]
  or tonumber(from.band) ~= band or from.tokens ~= 0 or band < 0
  or rcall('EXISTS', nextKey) == 1 then
  return 0
end
local tenant = loadTenant(from.tenant, true)
if not tenant then return 0 end
-- KV blocks may differ only where no quota counts them (the tenant's gauge follows).
local kvBlocks = tonumber(ARGV[11])
if kvBlocks ~= from.kvBlocks and tenant.maxKvBlocks then return 0 end

touchReplica(from.owner, now, cfg)
-- The finished request ends (endRequest without freeLease: its slot is not freed).
countFlow(ARGV[2], from.tenant, from.class)
if tonumber(ARGV[3]) then countFlow('inputTokens', from.tenant, from.class, ARGV[3]) end
if tonumber(ARGV[4]) then countFlow('outputTokens', from.tenant, from.class, ARGV[4]) end
local fromKey = requestPrefix .. from.id
rcall('DEL', fromKey)
rcall('ZREM', leasesKey, from.id)

-- The finished request's reservation settles (with its usage, as a release does); a
-- limited tenant's next request counts.
local limits, windows = nil, nil
local lim = ''
local inputTokens, outputTokens = tonumber(ARGV[3]), tonumber(ARGV[4])
local settles = from.lim ~= '' and inputTokens and outputTokens
if tenant.limitRow then
  -- Read with the tenant; the settle goes in with the count (one HSET).
  windows = limitWindows(now)
  limits = loadLimits(from.tenant, tenant.limitRow, windows)
  lim = countLimits(limits, windows, ARGV[12], settles and from.lim,
    settles and inputTokens + outputTokens)
elseif settles then
  settleLimits(from.tenant, from.lim, inputTokens + outputTokens)
end

-- Fairness in tokens: the finished request settles, the next one is charged.
local outMean = tenant.outMean
if from.w ~= '' and inputTokens and outputTokens then
  outMean = settleService(from, inputTokens, outputTokens, cfg)
end
local req = {
  id = nextId,
  tenant = from.tenant,
  band = from.band,
  owner = from.owner,
  class = ARGV[9],
  cost = tonumber(ARGV[10]),
  kvBlocks = kvBlocks,
  hint = '',
  tokens = 0,
  prefix = '',
  lim = lim,
  expiresAt = now + cfg.queueTtlMs,
  seq = 0,
}
if cfg.fairnessUnit == 'tokens' then
  req.cost = estimatedCost(tonumber(ARGV[13]) or 0, tonumber(ARGV[14]) or 0, outMean, cfg)
  chargeGrant(req, tenant.weight)
end
storeRequest(req, 'granted', from.pod)
rcall('ZADD', leasesKey, now + cfg.leaseTtlMs, nextId)
countFlow('admitted', req.tenant, req.class)
if kvBlocks ~= from.kvBlocks then
  local tenantKey = tenantPrefix .. req.tenant
  rcall('HINCRBY', tenantKey, 'kvBlocks', kvBlocks - from.kvBlocks)
end

local gauges = rcall('HMGET', ctlKey, 'waiting', 'inflight', 'budget')
local pods = loadPods()
local pod = pods.byName[from.pod]
local contended = (tonumber(gauges[1]) or 0) > 0
  or (tonumber(gauges[2]) or 0) > (tonumber(gauges[3]) or 0)
  or (tenant.maxConcurrent and tenant.inflight > tenant.maxConcurrent)
  or (tenant.maxKvBlocks and tenant.kvBlocks > tenant.maxKvBlocks)
  or not pod or not pod.healthy or pod.inflight > pod.cap
  or admissionCode(cfg, band, pods, now) ~= nil
  or not gateOpen(newGate(cfg, pods, now), band)
local reply = { 1, from.pod, contended and 1 or 0 }
if limits then return appendStanding(reply, limits, windows, now) end
return reply
