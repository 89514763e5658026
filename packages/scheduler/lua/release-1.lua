#!lua
--[[
  Ends a request with the caller's outcome: a granted one frees its slot (lease, tenant, pod
  and global counts) and, given the actual tokens, trues up its tenant's bucket and, given
  its input and output tokens, its budget reservation (includes/limits.lua) and, charged in
  tokens, its tenant's service counter (includes/service.lua); a queued one
  leaves its queue and gets its bucket tokens and its reservation back; then a dispatch pass hands the room to
  whoever is next. An unknown id (already ended, or never admitted) is a no-op, so a retried
  release never counts twice. Used for cancel too (outcome 'cancelled').

  Input:
    KEYS[1]  the pool's tag {fg:<pool>}: (includes/engineKeys.lua derives every key)
    ARGV[1]  request id
    ARGV[2]  outcome: completed | cancelled | evicted | upstream_error
    ARGV[3]  input tokens used, '' if unknown
    ARGV[4]  output tokens used, '' if unknown
    ARGV[5]  actual token-bucket cost for the true-up, '' for none
    ARGV[6]  leading prompt blocks the pod served from its prefix cache (from the usage's
             cached_tokens), '' if unknown: checked against the prefix index's prediction
             (includes/prefix.lua missedPrefix, correctPrefix)
    ARGV[7]  optional: most ms to stay quiet (the reply then carries the quiet ms: how long
             the caller may skip its polls after this release's pass, includes/quiet.lua)
    ARGV[8]  optional, with ARGV[7]: the caller's replica, whose BLMPOP is outstanding: its
             notices (those this pass made included) are popped into the reply, so a grant
             for the caller's next waiting request comes back here instead of waking that
             BLMPOP (src/redis/blocking-notices.ts)
    ARGV[9]  with ARGV[8]: most notices to pop

  Output:
    {state, predicted}: state 1 it was granted, 2 it was queued, 0 unknown id; predicted
    the prefix blocks the index predicted the pod held at its grant, -1 for none. With
    ARGV[7]: {state, predicted, quiet ms}; with ARGV[8]: {state, predicted, quiet ms,
    notice, ...} (notices as lua/poll-1.lua returns them)
]]
local rcall = redis.call
--- @include "includes/engineKeys"
--- @include "includes/dispatch"
--- @include "includes/quiet"

local mostQuietMs = tonumber(ARGV[7])
-- A bucket credit reads the time: the config (and so the pool's test clock) comes first.
local cfg = nil
local state = 0
local predicted = -1
local req = readRequest(ARGV[1])
if req then
  if req.tokens > 0 or req.px then cfg = loadConfig() end
  local missed = req.state == 'granted' and missedPrefix(req, tonumber(ARGV[6])) or nil
  endRequest(req, ARGV[2])
  local actualTokens = tonumber(ARGV[5])
  if actualTokens and req.state == 'granted' and req.tokens > 0 then
    creditTokens(req.tenant, req.tokens - actualTokens)
  end
  -- The budget reservation, trued up to what the pod reported (kept without a report).
  local inputTokens, outputTokens = tonumber(ARGV[3]), tonumber(ARGV[4])
  if req.lim ~= '' and req.state == 'granted' and inputTokens and outputTokens then
    settleLimits(req.tenant, req.lim, inputTokens + outputTokens)
  end
  -- Charged in tokens: the tenant's service counter trued up to the usage.
  if req.w ~= '' and req.state == 'granted' and inputTokens and outputTokens then
    cfg = cfg or loadConfig()
    if cfg then settleService(req, inputTokens, outputTokens, cfg) end
  end
  -- The counts as the caller sent them (integers, checked by the client), not as Lua numbers
  -- Redis would format again (includes/requests.lua).
  if inputTokens then countFlow('inputTokens', req.tenant, req.class, ARGV[3]) end
  if outputTokens then countFlow('outputTokens', req.tenant, req.class, ARGV[4]) end
  if req.px and req.state == 'granted' and cfg then
    predicted = correctPrefix(req, missed, cfg)
  end
  local _, passCfg = dispatchPass(nil, cfg, nil)
  cfg = cfg or passCfg
  if req.state == 'granted' then state = 1 else state = 2 end
end
if not mostQuietMs then return { state, predicted } end
local reply = { state, predicted, quietMs(nil, cfg, mostQuietMs) }
if ARGV[8] then
  -- Popped before Redis serves any blocked client (after the script): an emptied list wakes
  -- no BLMPOP.
  local notices = popNotices(ARGV[8], tonumber(ARGV[9]))
  for i = 1, #notices do reply[i + 3] = notices[i] end
end
return reply
