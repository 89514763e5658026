--- @include "includes/pods"
--- @include "includes/saturation"
--- @include "includes/lora"
--[[
  Prefix-aware pod choice (docs/routing.md). A request may carry the chained hashes of its
  prompt's first blocks (req:<id> field 'prefix', joined by ','). Each pod has an index of
  the hashes it was granted: two generations, the sets pxc:<pod> (current) and pxo:<pod>
  (previous), an approximate LRU (a generation: prefixGenerationOf). A grant adds the
  request's hashes to the current generation; when that holds a generation it is renamed
  to the previous one (dropping the old previous) and a new one starts; a generation
  expires prefixTtlMs after its first entry (PEXPIRE; RENAME keeps the TTL). PrefixIndex in
  src/local/prefix-index.ts and LocalEngine.choosePrefixPod are the TypeScript twins.
]]

-- The request's hashes as a list (split once per request table).
local function prefixHashes(req)
  if req.prefixHashes == nil then
    local hashes = {}
    if req.prefix and req.prefix ~= '' then
      for hash in string.gmatch(req.prefix, '[^,]+') do hashes[#hashes + 1] = hash end
    end
    req.prefixHashes = hashes
  end
  return req.prefixHashes
end

-- How many of `hashes`, from the first, pod `name` holds in either generation. Most pods
-- do not hold a request's first block: two one-member checks answer 0 for them, and only a
-- pod that does is asked about every block.
local function prefixMatched(name, hashes)
  local n = #hashes
  local currentKey = prefixCurrentPrefix .. name
  local previousKey = prefixPreviousPrefix .. name
  if rcall('SISMEMBER', currentKey, hashes[1]) == 0
    and rcall('SISMEMBER', previousKey, hashes[1]) == 0 then
    return 0
  end
  local current = rcall('SMISMEMBER', currentKey, unpack(hashes))
  local run = 0
  while run < n and current[run + 1] == 1 do run = run + 1 end
  if run == n then return n end
  local previous = rcall('SMISMEMBER', previousKey, unpack(hashes))
  while run < n and (current[run + 1] == 1 or previous[run + 1] == 1) do run = run + 1 end
  return run
end

-- The pod with room of the highest score (prefixScore in @fairgate/core src/prefix.ts, the
-- same arithmetic in the same order), the first in name order on a tie; nil when no pod
-- with room holds even the first block.
local function choosePrefixPod(pods, hashes, cfg, now)
  local n = #hashes
  local best, bestScore, anyMatch = nil, 0, false
  for _, pod in ipairs(pods.list) do
    if podHasRoom(pod) then
      local matched = prefixMatched(pod.name, hashes)
      if matched > 0 then anyMatch = true end
      local pressure = podPressure(pod, now, cfg) or 0
      local score = cfg.prefixWeight * matched / n - pod.inflight / pod.cap
        - cfg.prefixPressureWeight * pressure
      if not best or score > bestScore then best, bestScore = pod, score end
    end
  end
  if anyMatch then return best end
  return nil
end

-- Keys a pod's index holds (both generations): a prefix no pod holds goes to the
-- least-loaded pod, ties to the one holding the fewest (choosePod's tieBreak), so new prompts
-- spread over idle pods instead of all landing on the first by name.
local function prefixKeys(pod)
  local currentKey = prefixCurrentPrefix .. pod.name
  local previousKey = prefixPreviousPrefix .. pod.name
  return rcall('SCARD', currentKey) + rcall('SCARD', previousKey)
end

local function chooseAmong(pods, req, cfg, now)
  if cfg.prefixEnabled then
    local hashes = prefixHashes(req)
    if #hashes > 0 then
      return choosePrefixPod(pods, hashes, cfg, now) or choosePod(pods, nil, prefixKeys)
    end
  end
  return choosePod(pods, nil)
end

-- The pod for a request: its hinted pod when that has room; else, with prefix routing on
-- and a prefix, the best-scoring pod when some pod holds part of it, or the least-loaded
-- pod by prefixKeys when none does; else the least-loaded pod with room (LocalEngine.choosePod).
-- A request for a LoRA adapter chooses so among the pods adapterPods leaves (lora.lua); nil
-- when it waits.
local function chooseRequestPod(pods, req, cfg, now)
  if req.hint and req.hint ~= '' then
    local hinted = pods.byName[req.hint]
    if hinted and podHasRoom(hinted) then return hinted end
  end
  local candidates = adapterPods(pods, req, cfg)
  if not candidates then return nil end
  return claimAdapter(chooseAmong(candidates, req, cfg, now), req, cfg, now)
end

-- Entries of one generation of the pod's index (prefixGenerationSize in @fairgate/core):
-- half of prefixEntriesPerPod when set, else the blocks the pod's KV cache holds (its
-- scrape's pxcap), 32,768 until it says.
local function prefixGenerationOf(pod, cfg)
  if cfg.prefixEntriesPerPod > 0 then return cfg.prefixGeneration end
  return pod.prefixCapacity or 32768
end

-- A grant on `pod`: its index learns the request's hashes (prefix routing on).
local function rememberPrefix(pod, req, cfg)
  if not cfg.prefixEnabled then return end
  local hashes = prefixHashes(req)
  if #hashes == 0 then return end
  local currentKey = prefixCurrentPrefix .. pod.name
  local size = rcall('SCARD', currentKey)
  if size > 0 and size >= prefixGenerationOf(pod, cfg) then
    local previousKey = prefixPreviousPrefix .. pod.name
    rcall('RENAME', currentKey, previousKey)
    size = 0
  end
  rcall('SADD', currentKey, unpack(hashes))
  if size == 0 then rcall('PEXPIRE', currentKey, cfg.prefixTtlMs) end
end
