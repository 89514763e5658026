#!lua
--[[
  Admits a request: grants it at once when nothing waits and there is room, otherwise
  queues it and runs a dispatch pass (which may grant it, or others). Idempotent by id: a
  retry of a live request reports its state and counts (and charges) nothing again.

  Checks, in order: configuration and tenant errors (nothing counted), a retried live id,
  no healthy pod, the admission policy, a quota the request can never fit, the tenant's
  budgets and rate (includes/limits.lua), its token bucket; then queue, dispatch pass,
  queue caps (with queue shedding).

  Input:
    KEYS[1]  the pool's tag {fg:<pool>}: (includes/engineKeys.lua derives every key)
    ARGV[1]  request id
    ARGV[2]  tenant
    ARGV[3]  band (integer; higher dispatches first)
    ARGV[4]  owner replica
    ARGV[5]  SLO class (counter label)
    ARGV[6]  cost (DRR units, integer >= 1)
    ARGV[7]  KV blocks (integer >= 0)
    ARGV[8]  deadline in ms from now, '' for none (slo-deadline order)
    ARGV[9]  queue TTL in ms, '' for the pool default
    ARGV[10] preferred pod, '' for none
    ARGV[11] token-bucket cost (integer >= 0; 0 = not charged)
    ARGV[12] prompt block hashes joined by ',', '' for none (includes/prefix.lua)
    ARGV[13] token estimate reserved against the tenant's budgets (integer >= 0; '' = 0)
    ARGV[14] input tokens (the gateway's estimate; integer >= 0, '' = 0) and
    ARGV[15] max_tokens (integer >= 0, '' = 0): with fairness in tokens its cost is worked
             out from them (includes/service.lua estimatedCost) instead of ARGV[6]
    ARGV[16] the LoRA adapter it asks for, '' (or absent) for none (includes/lora.lua)

  Output:
    {1, pod, retried}   granted on pod (retried = 1 when the id was already live)
    {1, pod, 0, 1}      granted by the dispatch pass after it queued: other requests
                        waited (the pool is contended; slot recycling stops, handover-1.lua)
    {0, false, retried} queued; a 'grant', 'expired' or 'shed' notice follows
    {code, retryAfterMs | false}  rejected and counted: Code.TenantQueueFull | BandFull |
        GlobalQueueFull | QuotaConcurrencyNeverFits | QuotaKvBlocksNeverFits | NoHealthyPod |
        RateLimited (with the retry-after when waiting helps) | ShedByTier | Saturated |
        RejectedByPolicy | BudgetExhausted | RequestRateLimited (both with the ms until
        the window ends)
    Code.NotConfigured | UnknownTenant   configuration errors (nothing counted)
  For a tenant with a budget or a rate (tenant.limited), every reply but a retry's is padded
  to 4 elements ({code, retryAfterMs | false, 0, 0} when rejected) and followed by the 6 of
  its standing after this request (includes/limits.lua appendStanding).
]]
local rcall = redis.call
--- @include "includes/engineKeys"
--- @include "includes/codes"
--- @include "includes/serverTime"
--- @include "includes/config"
--- @include "includes/dispatch"
--- @include "includes/admission"
--- @include "includes/shedding"
--- @include "includes/limits"
--- @include "includes/service"

local cfg = loadConfig()
if not cfg then return Code.NotConfigured end
local now = serverNowMs()

local req = {
  id = ARGV[1],
  tenant = ARGV[2],
  band = ARGV[3],
  owner = ARGV[4],
  class = ARGV[5],
  cost = tonumber(ARGV[6]),
  kvBlocks = tonumber(ARGV[7]),
  hint = ARGV[10],
  tokens = 0,
  prefix = ARGV[12] or '',
  lim = '',
  adapter = ARGV[16] or '',
}
local band = tonumber(req.band)
touchReplica(req.owner, now, cfg)

local requestKey = requestPrefix .. req.id
local existing = rcall('HMGET', requestKey, 'state', 'pod')
if existing[1] == 'granted' then return { 1, existing[2], 1 } end
if existing[1] == 'queued' then return { 0, false, 1 } end

local tenant = loadTenant(req.tenant, true)
if not tenant then return Code.UnknownTenant end
-- From here every path counts the arrival once, admitted or rejected: offered is their sum
-- (src/counters.ts), so it costs no HINCRBY of its own.

-- A limited tenant's budgets and rates, read with it: checked below, and every reply
-- carries its standing.
local limits, windows = nil, nil
if tenant.limitRow then
  windows = limitWindows(now)
  limits = loadLimits(req.tenant, tenant.limitRow, windows)
end
local function answer(reply)
  if not limits then return reply end
  for i = #reply + 1, 4 do reply[i] = 0 end
  return appendStanding(reply, limits, windows, now)
end

local function reject(code, retryAfterMs)
  countRejection(req.tenant, req.class, code)
  return answer({ code, retryAfterMs or false })
end

local pods = loadPods()
if not anyHealthyPod(pods) then return reject(Code.NoHealthyPod) end
local policyCode = admissionCode(cfg, band, pods, now)
if policyCode then return reject(policyCode) end
if tenant.maxConcurrent == 0 then return reject(Code.QuotaConcurrencyNeverFits) end
if tenant.maxKvBlocks and req.kvBlocks > tenant.maxKvBlocks then
  return reject(Code.QuotaKvBlocksNeverFits)
end
if limits then
  local limitCode, untilEnd = checkLimits(limits, windows, now)
  if limitCode then return reject(limitCode, untilEnd) end
end
local tokens = tonumber(ARGV[11])
local bucketCode, retryAfterMs = takeTokens(req.tenant, tenant, tokens, now)
if bucketCode then return reject(bucketCode, retryAfterMs) end
if tenant.bucketCapacity then req.tokens = tokens end
if limits then req.lim = countLimits(limits, windows, ARGV[13]) end
if cfg.fairnessUnit == 'tokens' then
  req.cost = estimatedCost(tonumber(ARGV[14]) or 0, tonumber(ARGV[15]) or 0, tenant.outMean, cfg)
end

local ttlMs = tonumber(ARGV[9]) or cfg.queueTtlMs
req.expiresAt = now + ttlMs
req.seq = 0

-- Fast path: with nothing waiting anywhere the pass would pick this request first, so
-- grant it without touching queues or rings (same state as the long way round).
local gauges = rcall('HMGET', ctlKey, 'waiting', 'inflight', 'budget', 'peakInflight')
if (tonumber(gauges[1]) or 0) == 0 and not tenantAtQuota(tenant, req.kvBlocks)
  and (tonumber(gauges[2]) or 0) < (tonumber(gauges[3]) or 0)
  and gateOpen(newGate(cfg, pods, now), band) then
  local pod = chooseRequestPod(pods, req, cfg, now)
  if pod then
    if cfg.fairnessUnit == 'tokens' then chargeGrant(req, tenant.weight) end
    storeRequest(req, 'granted', pod.name)
    holdLease(req, pod, now, cfg, now + cfg.leaseTtlMs,
      { peakInflight = tonumber(gauges[4]) or 0 })
    rememberPrefix(pod, req, cfg)
    countFlow('admitted', req.tenant, req.class)
    return answer({ 1, pod.name, 0 })
  end
end

-- The arrival sequence orders fifo queues and a replica's waiting requests (queueScore in
-- @fairgate/core is the same rule).
req.seq = rcall('HINCRBY', ctlKey, 'seq', '1')
local score = req.seq
if cfg.dispatchOrder == 'slo-deadline' then score = now + (tonumber(ARGV[8]) or ttlMs) end
storeRequest(req, 'queued', nil)
linkWaiting(req, score)
joinFlow(req.band, req.tenant, tenant.weight * cfg.quantum, cfg)

local grantedPod = dispatchPass(now, cfg, req.id)
if grantedPod then
  countFlow('admitted', req.tenant, req.class)
  return answer({ 1, grantedPod, 0, 1 })
end

-- Still waiting: the caps bound what waits, so they are checked now (a request granted at
-- once never counts against a queue cap). With queue shedding a full tenant or global queue
-- replaces a lower-band sheddable waiting request with the arrival (no count grows); a full
-- band never sheds (its requests all share the arrival's priority).
local waitingNow = rcall('HMGET', ctlKey, 'waiting', 'waiting:' .. req.band)
local tenantKey = tenantPrefix .. req.tenant
local tenantOver = tenant.queueMax and tonumber(rcall('HGET', tenantKey, 'waiting')) > tenant.queueMax
local bandOver = tonumber(waitingNow[2]) > cfg.bandCapacity
local code, victim = nil, nil
if tenantOver then
  code = Code.TenantQueueFull
  if cfg.queueShedding and not bandOver then victim = shedVictim(req.tenant, band) end
elseif bandOver then
  code = Code.BandFull
elseif tonumber(waitingNow[1]) > cfg.maxQueueDepth then
  code = Code.GlobalQueueFull
  if cfg.queueShedding then victim = shedVictim(nil, band) end
end
if victim then
  shedWaiting(victim)
  code = nil
end
if code then
  unlinkWaiting(req)
  rcall('DEL', requestKey)
  if req.tokens > 0 then creditTokens(req.tenant, req.tokens) end
  if req.lim ~= '' then
    undoLimits(limits, req.lim)
    -- The standing after it: the pass may have given back others' reservations too.
    limits = loadLimits(req.tenant, loadTenant(req.tenant, true).limitRow, windows)
  end
  return reject(code)
end
countFlow('admitted', req.tenant, req.class)
return answer({ 0, false, 0 })
