--- @include "includes/bytes"
-- pods hash fields 'cap:<pod>', 'healthy:<pod>' ('1'|'0') and 'inflight:<pod>', and the
-- leader's scrape (reportPodLoad-4.lua): 'waiting:<pod>', 'running:<pod>', 'kv:<pod>',
-- 'scrapedAt:<pod>' (server ms; absent = never scraped) and 'pxcap:<pod>' (the prompt blocks
-- its KV cache holds; absent until a scrape says) and 'lslots:<pod>' (its LoRA adapter slots,
-- vllm:lora_requests_info's max_lora; absent until a report says). Loaded once per pass, pods being
-- few, and kept current in memory as the pass grants and evicts.

-- A pod as no field of the hash has set it yet.
local function resetPod(pod)
  pod.cap, pod.healthy, pod.inflight = 0, false, 0
  pod.waiting, pod.running, pod.kv, pod.scrapedAt = nil, nil, nil, nil
  pod.prefixCapacity = nil
  pod.loraSlots = nil
end

-- Sets one parsed field on its pod.
local function setPodField(pod, kind, value)
  if kind == 'cap' then pod.cap = tonumber(value)
  elseif kind == 'healthy' then pod.healthy = value == '1'
  elseif kind == 'inflight' then pod.inflight = tonumber(value)
  elseif kind == 'waiting' then pod.waiting = tonumber(value)
  elseif kind == 'running' then pod.running = tonumber(value)
  elseif kind == 'kv' then pod.kv = tonumber(value)
  elseif kind == 'scrapedAt' then pod.scrapedAt = tonumber(value)
  elseif kind == 'pxcap' then pod.prefixCapacity = tonumber(value)
  elseif kind == 'lslots' then pod.loraSlots = tonumber(value) end
end

-- The last parse, kept at the library's top level: the hash's field names in the order
-- HGETALL gave them and, per field, its pod and kind. A small hash keeps its fields in
-- insertion order, so between writes of new fields the names come back the same (equal Lua
-- strings are one interned object: comparing them is cheap) and only the values are set
-- again on the same pod tables: no string splitting, no new tables, no sort. Every value is
-- set from this read, so nothing of an earlier call survives but the layout. A call that
-- changes pod.inflight in memory (holdLease, evictOne) changes a value this read resets.
local podLayout = nil

local function parsePods(flat)
  local byName, names = {}, {}
  local fieldPods, fieldKinds = {}, {}
  for i = 1, #flat, 2 do
    local field, value = flat[i], flat[i + 1]
    local sep = string.find(field, ':', 1, true)
    if sep then
      local kind, name = string.sub(field, 1, sep - 1), string.sub(field, sep + 1)
      local pod = byName[name]
      if not pod then
        pod = { name = name }
        resetPod(pod)
        byName[name] = pod
        names[#names + 1] = name
      end
      setPodField(pod, kind, value)
      fieldPods[i], fieldKinds[i] = pod, kind
    end
  end
  table.sort(names, bytesLess)
  local list = {}
  for i, name in ipairs(names) do list[i] = byName[name] end
  local pods = { list = list, byName = byName }
  podLayout = { of = podsKey, fields = flat, pods = pods, fieldPods = fieldPods,
    fieldKinds = fieldKinds }
  return pods
end

local function loadPods()
  local flat = rcall('HGETALL', podsKey)
  local layout = podLayout
  if not layout or layout.of ~= podsKey or #layout.fields ~= #flat then
    return parsePods(flat)
  end
  local fields = layout.fields
  for i = 1, #flat, 2 do
    if flat[i] ~= fields[i] then return parsePods(flat) end
  end
  local fieldPods, fieldKinds = layout.fieldPods, layout.fieldKinds
  for _, pod in ipairs(layout.pods.list) do resetPod(pod) end
  for i = 1, #flat, 2 do
    local pod = fieldPods[i]
    if pod then setPodField(pod, fieldKinds[i], flat[i + 1]) end
  end
  return layout.pods
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
-- under its cap (load = inflight / cap, compared exactly). Ties go to the lowest
-- tieBreak(pod) when given (asked of each candidate as the scan meets it), then to the
-- bytewise-first name.
local function choosePod(pods, hint, tieBreak)
  if hint and hint ~= '' then
    local hinted = pods.byName[hint]
    if hinted and podHasRoom(hinted) then return hinted end
  end
  local best, bestTie = nil, 0
  for _, pod in ipairs(pods.list) do
    if podHasRoom(pod) then
      if not best or pod.inflight * best.cap < best.inflight * pod.cap then
        best = pod
        if tieBreak then bestTie = tieBreak(pod) end
      elseif tieBreak and pod.inflight * best.cap == best.inflight * pod.cap then
        local key = tieBreak(pod)
        if key < bestTie then best, bestTie = pod, key end
      end
    end
  end
  return best
end
