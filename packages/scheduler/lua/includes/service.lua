--- @include "includes/tenants"
--[[
  Fairness in tokens (cfg.fairnessUnit 'tokens'): ServiceCounters in @fairgate/core, whose
  comment states the rules and invariants. A band's backlogged tenants are the zset
  band:<band>:vtc scored by service counter (service in thousandths of a weighted token per
  unit of weight); the serviceKey hash keeps a tenant's counter while it is backlogged
  nowhere ('<band>:<tenant>') and the band's last leaver's ('<band>:'). A counter crosses
  between the two as the text Redis gave it, so a HINCRBY can read it (integers, exact up to
  2^53, far beyond any tenant's service).
]]
-- What `cost` weighted tokens add to the counter of a tenant of `weight` (virtualCost).
local function virtualCost(cost, weight)
  return math.ceil(cost * 1000 / weight)
end

-- The tenant starts waiting in the band: lifted to the smallest backlogged counter, else to
-- the last leaver's, unless its own is higher.
local function joinCounters(band, tenant)
  local setKey = ringPrefix .. band .. ':vtc'
  if rcall('ZSCORE', setKey, tenant) then return end
  local idle = rcall('HMGET', serviceKey, band .. ':' .. tenant, band .. ':')
  local first = rcall('ZRANGE', setKey, 0, 0, 'WITHSCORES')
  local floor = tonumber(first[2]) or tonumber(idle[2]) or 0
  local own = tonumber(idle[1]) or 0
  if own > floor then
    rcall('ZADD', setKey, idle[1], tenant)
  else
    rcall('ZADD', setKey, first[2] or idle[2] or '0', tenant)
  end
  if not first[1] then rcall('ZADD', bandsKey, band, band) end
end

-- The tenant stops being backlogged in the band with `counter` (text, as Redis gave it).
local function leaveCounters(band, tenant, counter)
  local setKey = ringPrefix .. band .. ':vtc'
  rcall('ZREM', setKey, tenant)
  rcall('HSET', serviceKey, band .. ':' .. tenant, counter, band .. ':', counter)
  if rcall('ZCARD', setKey) == 0 then rcall('ZREM', bandsKey, band) end
end

-- Adds delta to the tenant's counter, backlogged or not (ServiceCounters.add).
local function addService(band, tenant, delta)
  if delta == 0 then return end
  local setKey = ringPrefix .. band .. ':vtc'
  if not rcall('ZADD', setKey, 'XX', 'INCR', delta, tenant) then
    rcall('HINCRBY', serviceKey, band .. ':' .. tenant, delta)
  end
end

-- A grant made outside a dispatch pass (on an empty pool, or a recycled slot's next request)
-- is charged its estimate wherever its tenant's counter is; req.w keeps the weight it was
-- charged at, for its release (LocalEngine.chargeGrant).
local function chargeGrant(req, weight)
  req.w = weight
  addService(req.band, req.tenant, virtualCost(req.cost, weight))
end

-- Mirror of packages/core/src/token-cost.ts: a request's cost in weighted tokens, its
-- estimate at admission (max_tokens capped by the tenant's mean output, thousandths of a
-- token, nil before the first sample) and the mean after a sample.
local function weightedTokens(input, output, cfg)
  return math.max(1, input * cfg.tokenWeightInput + output * cfg.tokenWeightOutput)
end

local function estimatedCost(input, maxTokens, meanMilli, cfg)
  local expected = maxTokens
  if meanMilli then expected = math.min(maxTokens, math.ceil(meanMilli / 1000)) end
  return weightedTokens(input, expected, cfg)
end

local function nextMeanOutput(meanMilli, output)
  local sample = output * 1000
  if not meanMilli then return sample end
  return math.floor((meanMilli * 7 + sample) / 8)
end

-- A granted request charged in tokens (req.w, the weight it was charged at) ends with its
-- usage: its tenant's counter gets the difference from its estimate (req.cost), and the
-- tenant's mean output (tenant field outMean) the sample. Returns the new mean.
local function settleService(req, inputTokens, outputTokens, cfg)
  local weight = tonumber(req.w)
  local actual = weightedTokens(inputTokens, outputTokens, cfg)
  addService(req.band, req.tenant, virtualCost(actual, weight) - virtualCost(req.cost, weight))
  local tenantKey = tenantPrefix .. req.tenant
  local mean = nextMeanOutput(tonumber(rcall('HGET', tenantKey, 'outMean')), outputTokens)
  rcall('HSET', tenantKey, 'outMean', mean)
  return mean
end
