--- @include "includes/bytes"
-- pods hash fields 'cap:<pod>', 'healthy:<pod>' ('1'|'0') and 'inflight:<pod>', and the
-- leader's scrape (reportPodLoad-3.lua): 'waiting:<pod>', 'running:<pod>', 'kv:<pod>' and
-- 'scrapedAt:<pod>' (server ms; absent = never scraped). Loaded once per pass, pods being
-- few, and kept current in memory as the pass grants and evicts.
local function loadPods()
  local flat = rcall('HGETALL', podsKey)
  local byName, names = {}, {}
  for i = 1, #flat, 2 do
    local field, value = flat[i], flat[i + 1]
    local sep = string.find(field, ':', 1, true)
    if sep then
      local kind, name = string.sub(field, 1, sep - 1), string.sub(field, sep + 1)
      local pod = byName[name]
      if not pod then
        pod = { name = name, cap = 0, healthy = false, inflight = 0 }
        byName[name] = pod
        names[#names + 1] = name
      end
      if kind == 'cap' then pod.cap = tonumber(value)
      elseif kind == 'healthy' then pod.healthy = value == '1'
      elseif kind == 'inflight' then pod.inflight = tonumber(value)
      elseif kind == 'waiting' then pod.waiting = tonumber(value)
      elseif kind == 'running' then pod.running = tonumber(value)
      elseif kind == 'kv' then pod.kv = tonumber(value)
      elseif kind == 'scrapedAt' then pod.scrapedAt = tonumber(value) end
    end
  end
  table.sort(names, bytesLess)
  local list = {}
  for i, name in ipairs(names) do list[i] = byName[name] end
  return { list = list, byName = byName }
end

local function podHasRoom(pod)
  return pod.healthy and pod.inflight < pod.cap
end

local function anyHealthyPod(pods)
  for _, pod in ipairs(pods.list) do
    if pod.healthy then return true end
  end
  return false
end

-- The hinted pod when it is healthy and under its cap, else the least-loaded healthy pod
-- under its cap (load = inflight / cap, compared exactly; ties go to the bytewise-first
-- name).
local function choosePod(pods, hint)
  if hint and hint ~= '' then
    local hinted = pods.byName[hint]
    if hinted and podHasRoom(hinted) then return hinted end
  end
  local best = nil
  for _, pod in ipairs(pods.list) do
    if podHasRoom(pod) and (not best or pod.inflight * best.cap < best.inflight * pod.cap) then
      best = pod
    end
  end
  return best
end
