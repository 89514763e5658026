--- @include "includes/serverTime"
--- @include "includes/config"
--- @include "includes/pods"
--- @include "includes/ring"
--[[
  The dispatch pass: grants waiting requests while the global budget and some pod have
  room, highest band first (strict priority), the band's fairness policy inside it. A band
  whose members are all at quota is passed over for the next one; running out of budget or
  pods ends the pass. Bounded by cfg.maxGrantsPerPass; costs O(grants + skipped flows)
  because only tenants with waiting requests sit in rings.
  now and cfg may be nil: they are only read when something waits and the budget has room,
  so a release with nothing waiting stays cheap.
  selfId: the caller's own request (enqueue), answered in the reply instead of a notice.
  Returns the pod granted to selfId, or nil.
]]
local function dispatchPass(now, cfg, selfId)
  local gauges = rcall('HMGET', ctlKey, 'waiting', 'inflight', 'budget')
  if (tonumber(gauges[1]) or 0) <= 0 then return nil end
  local inflight = tonumber(gauges[2]) or 0
  local budget = tonumber(gauges[3]) or 0
  if inflight >= budget then return nil end
  now = now or serverNowMs()
  cfg = cfg or loadConfig()
  if not cfg then return nil end
  local pods = loadPods()
  local grants, selfPod = 0, nil
  for _, band in ipairs(rcall('ZREVRANGE', bandsKey, 0, -1)) do
    while grants < cfg.maxGrantsPerPass and inflight < budget and choosePod(pods, nil) do
      local req = selectFlow(band, now, cfg)
      if not req then break end
      local pod = choosePod(pods, req.hint)
      unlinkWaiting(req)
      local requestKey = requestPrefix .. req.id
      rcall('HSET', requestKey, 'state', 'granted', 'pod', pod.name)
      holdLease(req, pod, now, cfg, req.ownerLiveness)
      local queueKey = queuePrefix .. band .. ':' .. req.tenant
      chargeFlow(band, req.tenant, req.cost, cfg, rcall('ZCARD', queueKey) == 0)
      grants = grants + 1
      inflight = inflight + 1
      if req.id == selfId then
        selfPod = pod.name
      else
        notifyReplica(req.owner, 'grant|' .. req.id .. '|' .. pod.name)
      end
    end
    if grants >= cfg.maxGrantsPerPass or inflight >= budget or not choosePod(pods, nil) then
      break
    end
  end
  return selfPod
end
