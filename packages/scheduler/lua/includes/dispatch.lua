--- @include "includes/serverTime"
--- @include "includes/config"
--- @include "includes/pods"
--- @include "includes/saturation"
--- @include "includes/prefix"
--- @include "includes/ring"
--[[
  The dispatch pass: grants waiting requests while the global budget and some pod have room.
  dispatchOrder priority / slo-deadline: highest band first (strict priority), the band's
  fairness policy inside it; a band whose members are all at quota is passed over for the
  next one. dispatchOrder fifo: the globally earliest head across bands and tenants.
  Saturation gating (settings.gating) skips a band whose gate is closed. Running out of
  budget or pods ends the pass, unless in-flight eviction (settings.inflightEviction) takes
  a sheddable in-flight request's slot for a waiting non-sheddable one.
  Bounded by cfg.maxGrantsPerPass grants and as many evictions; costs O(grants + skipped
  flows) because only tenants with waiting requests sit in rings (fifo: O(waiting flows)
  per grant, as global-strict is per band).
  now and cfg may be nil: they are only read when something waits and the budget has room
  (or in-flight eviction is on), so a release with nothing waiting stays cheap.
  selfId: the caller's own request (enqueue), answered in the reply instead of a notice.
  Returns the pod granted to selfId, or nil, and the config when it loaded one (for the
  caller's quiet hint). LocalEngine.dispatchPass takes the same steps.
]]

local function hasRoom(pass)
  return pass.inflight < pass.budget and choosePod(pass.pods, nil) ~= nil
end

-- Whether a waiting request of `band` may evict for its slot: non-sheddable, eviction on,
-- and the pass's eviction bound not reached.
local function mayEvict(pass, band)
  return pass.cfg.inflightEviction and tonumber(band) >= 0
    and pass.evictions < pass.cfg.maxGrantsPerPass
end

-- Evicts the most evictable in-flight request (lowest band, newest grant first): the lease
-- lapse path (outcome evicted, owner told). false when no sheddable request is in flight.
-- Entries whose request is gone or not granted (left by an older script version during a
-- rolling deploy) are dropped on the way.
local function evictOne(pass)
  local victim = nil
  while not victim do
    local id = rcall('ZRANGE', evictableKey, 0, 0)[1]
    if not id then return false end
    victim = readRequest(id)
    if not victim or victim.state ~= 'granted' then
      victim = nil
      rcall('ZREM', evictableKey, id)
    end
  end
  evictGranted(victim)
  pass.inflight = pass.inflight - 1
  local pod = pass.pods.byName[victim.pod]
  if pod then pod.inflight = pod.inflight - 1 end
  pass.evictions = pass.evictions + 1
  return true
end

-- A closed gate is not opened by an eviction until the next scrape shows it, so a waiting
-- non-sheddable request behind a closed gate evicts at most once per new scrape (and once
-- per pass): ctl.gateEvictedScrape remembers the scrape the last such eviction was for.
local function gateEviction(pass)
  if pass.gateTried then return end
  pass.gateTried = true
  local newest = newestScrape(pass.pods)
  if not newest then return end
  if newest <= (tonumber(rcall('HGET', ctlKey, 'gateEvictedScrape')) or -1) then return end
  if evictOne(pass) then rcall('HSET', ctlKey, 'gateEvictedScrape', newest) end
end

local function grantWaiting(pass, req, band, fifo)
  local pod = chooseRequestPod(pass.pods, req, pass.cfg, pass.now)
  unlinkWaiting(req)
  local requestKey = requestPrefix .. req.id
  if req.weight then
    -- Charged in tokens (selectByService): the weight its release trues up at.
    rcall('HSET', requestKey, 'state', 'granted', 'pod', pod.name, 'prefix', '', 'w', req.weight)
  else
    rcall('HSET', requestKey, 'state', 'granted', 'pod', pod.name, 'prefix', '')
  end
  holdLease(req, pod, pass.now, pass.cfg, req.ownerLiveness, pass)
  rememberPrefix(pod, req, pass.cfg)
  -- req always comes from probeFlow (selectFlow, selectEarliest), which saw whether another
  -- request waits behind it.
  local queueEmptyNow = not req.queueHasMore
  if fifo then
    -- Fairness is not used in fifo: no deficits, only ring membership.
    if queueEmptyNow then leaveRing(band, req.tenant) end
  else
    chargeFlow(band, req.tenant, req.cost, pass.cfg, queueEmptyNow, req.weight)
  end
  pass.grants = pass.grants + 1
  pass.inflight = pass.inflight + 1
  if req.id == pass.selfId then
    pass.selfPod = pod.name
  else
    -- Its owner is registered and alive: the probe read its liveness (req.ownerLiveness,
    -- the lease's bound), and nothing in a pass removes a replica.
    pushNotice(req.owner, 'grant|' .. req.id .. '|' .. pod.name)
  end
end

local function priorityPass(pass)
  local cfg = pass.cfg
  for _, band in ipairs(rcall('ZREVRANGE', bandsKey, 0, -1)) do
    local stop = false
    if not gateOpen(pass.gate, band) then
      if mayEvict(pass, band) and not pass.gateTried and selectFlow(band, pass.now, cfg) then
        gateEviction(pass)
      end
    else
      while pass.grants < cfg.maxGrantsPerPass do
        -- Each grant adds to a pod's queue: the gate may close part-way through a band.
        if not gateOpen(pass.gate, band) then break end
        local room = hasRoom(pass)
        if not room and not mayEvict(pass, band) then
          stop = true
          break
        end
        local req = selectFlow(band, pass.now, cfg)
        if not req then break end
        if room then
          grantWaiting(pass, req, band, false)
        elseif not evictOne(pass) then
          stop = true
          break
        end
      end
    end
    if stop or pass.grants >= cfg.maxGrantsPerPass then break end
  end
end

local function fifoPass(pass)
  local cfg = pass.cfg
  while pass.grants < cfg.maxGrantsPerPass do
    if not cfg.inflightEviction and not hasRoom(pass) then return end
    -- Closed bands are only looked at while a gate eviction is still possible.
    local scanClosed = cfg.inflightEviction and not pass.gateTried
    local best, bestBand, bestScore = nil, nil, nil
    local first, firstBand, firstScore, firstOpen = nil, nil, nil, false
    for _, band in ipairs(rcall('ZREVRANGE', bandsKey, 0, -1)) do
      local open = gateOpen(pass.gate, band)
      if open or scanClosed then
        local req, score = selectEarliest(band, pass.now)
        if req then
          if open and (not best or orderKeyLess(score, req.id, bestScore, best.id)) then
            best, bestBand, bestScore = req, band, score
          end
          if not first or orderKeyLess(score, req.id, firstScore, first.id) then
            first, firstBand, firstScore, firstOpen = req, band, score, open
          end
        end
      end
    end
    if first and not firstOpen and mayEvict(pass, firstBand) then gateEviction(pass) end
    if not best then return end
    if hasRoom(pass) then
      grantWaiting(pass, best, bestBand, true)
    elseif not mayEvict(pass, bestBand) or not evictOne(pass) then
      return
    end
  end
end

local function dispatchPass(now, cfg, selfId)
  local gauges = rcall('HMGET', ctlKey, 'waiting', 'inflight', 'budget', 'peakInflight')
  if (tonumber(gauges[1]) or 0) <= 0 then return nil end
  local inflight = tonumber(gauges[2]) or 0
  local budget = tonumber(gauges[3]) or 0
  if inflight >= budget then
    cfg = cfg or loadConfig()
    if not cfg or not cfg.inflightEviction then return nil, cfg end
  end
  cfg = cfg or loadConfig()
  if not cfg then return nil end
  now = now or serverNowMs()
  local pods = loadPods()
  local pass = {
    now = now, cfg = cfg, pods = pods, gate = newGate(cfg, pods, now), selfId = selfId,
    inflight = inflight, budget = budget, grants = 0, evictions = 0, gateTried = false,
    peakInflight = tonumber(gauges[4]) or 0,
  }
  loraBeginPass(pods, cfg)
  if cfg.dispatchOrder == 'fifo' then fifoPass(pass) else priorityPass(pass) end
  return pass.selfPod, cfg
end
