--- @include "includes/pods"
--[[
  Load signals from the pods table (loadPods), the same arithmetic in the same order as
  poolSaturation / maxPodLoad / newestScrapeMs in @fairgate/core src/admission.ts, so both
  scheduler implementations get bit-identical results. Pods are in name order.
]]
local function freshLoad(pod, now, cfg)
  return pod.scrapedAt ~= nil and now - pod.scrapedAt <= cfg.staleMs
end

-- Requests queued at a pod, current between scrapes: max(scraped waiting, the gateways'
-- in-flight on the pod - scraped running) (queuedAtPod in src/admission.ts).
local function queuedAtPod(pod)
  return math.max(pod.waiting, pod.inflight - pod.running)
end

-- One pod's max(queued / queueDepthThreshold, kv / kvCacheUtilThreshold) from a fresh
-- scrape, nil without one (podPressure in src/admission.ts).
local function podPressure(pod, now, cfg)
  if not freshLoad(pod, now, cfg) then return nil end
  return math.max(queuedAtPod(pod) / cfg.queueDepthThreshold, pod.kv / cfg.kvCacheUtilThreshold)
end

-- Mean over healthy pods of podPressure; never scraped or stale counts 1.0; no healthy pod
-- is 1.0.
local function poolSaturation(pods, now, cfg)
  local sum, count = 0, 0
  for _, pod in ipairs(pods.list) do
    if pod.healthy then
      count = count + 1
      sum = sum + (podPressure(pod, now, cfg) or 1)
    end
  end
  if count == 0 then return 1 end
  return sum / count
end

-- The newest scrape time among healthy pods, nil when none was scraped.
local function newestScrape(pods)
  local newest = nil
  for _, pod in ipairs(pods.list) do
    if pod.healthy and pod.scrapedAt and (not newest or pod.scrapedAt > newest) then
      newest = pod.scrapedAt
    end
  end
  return newest
end

-- tier-shed's signal: max over all pods of max(in-flight, fresh running + waiting).
local function maxPodLoad(pods, now, cfg)
  local max = 0
  for _, pod in ipairs(pods.list) do
    local load = pod.inflight
    if freshLoad(pod, now, cfg) then load = math.max(load, pod.running + pod.waiting) end
    max = math.max(max, load)
  end
  return max
end

-- Saturation gating: a band dispatches while saturation < its ceiling (gating.bandCeilings,
-- else gating.defaultCeiling). Saturation is computed on every question (pods are few), so
-- each grant of a pass, which raises its pod's in-flight count, is seen by the next; and
-- only when gating is enabled.
local function newGate(cfg, pods, now)
  return { cfg = cfg, pods = pods, now = now }
end

local function gateOpen(gate, band)
  local cfg = gate.cfg
  if not cfg.gatingEnabled then return true end
  if gate.ceilings == nil then gate.ceilings = cjson.decode(cfg.gatingBandCeilings) end
  local ceiling = gate.ceilings[tostring(tonumber(band))] or cfg.gatingDefaultCeiling
  return poolSaturation(gate.pods, gate.now, cfg) < ceiling
end
