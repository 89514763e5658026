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
  local best, bestScore, bestMatched, anyMatch = nil, 0, 0, false
  for _, pod in ipairs(pods.list) do
    if podHasRoom(pod) then
      local matched = prefixMatched(pod.name, hashes)
      if matched > 0 then anyMatch = true end
      local pressure = podPressure(pod, now, cfg) or 0
      local score = cfg.prefixWeight * matched / n - pod.inflight / pod.cap
        - cfg.prefixPressureWeight * pressure
      if not best or score > bestScore then best, bestScore, bestMatched = pod, score, matched end
    end
  end
  if anyMatch then return best, bestMatched end
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

-- chooseRequestPod's choice among `pods`. With a prefix, req.prefixMatched keeps the chosen
-- pod's leading run (rememberPrefix records it as the index's prediction).
local function chooseAmong(pods, req, cfg, now)
  if cfg.prefixEnabled then
    local hashes = prefixHashes(req)
    if #hashes > 0 then
      local best, matched = choosePrefixPod(pods, hashes, cfg, now)
      if best then
        req.prefixMatched = matched
        return best
      end
      -- No pod with room holds even the first block.
      req.prefixMatched = 0
      return choosePod(pods, nil, prefixKeys)
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
-- half of prefixEntriesPerPod when set, else half the blocks the pod's KV cache holds (its
-- scrape's pxcap), 32,768 until it says.
local function prefixGenerationOf(pod, cfg)
  if cfg.prefixEntriesPerPod > 0 then return cfg.prefixGeneration end
  if pod.prefixCapacity then return math.ceil(pod.prefixCapacity / 2) end
  return 32768
end

-- A grant on `pod` (prefix routing on): the request records the index's prediction, the
-- leading run of its hashes the pod holds (field 'px'; with a run of 2 or more, which its
-- release may find missed, it keeps its hashes too, as 'pxk': a field readRequest does not
-- read, so only a miss reads them back), and the index learns its hashes.
local function rememberPrefix(pod, req, cfg)
  if not cfg.prefixEnabled then return end
  local hashes = prefixHashes(req)
  if #hashes == 0 then return end
  local matched = req.prefixMatched or prefixMatched(pod.name, hashes)
  local requestKey = requestPrefix .. req.id
  if matched > 1 then
    rcall('HSET', requestKey, 'px', matched, 'pxk', req.prefix)
  else
    rcall('HSET', requestKey, 'px', matched)
  end
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

-- At the release of a granted request, before it ends: what the pod served from its cache
-- (`cachedBlocks`, the leading prompt blocks of the usage's cached_tokens; nil when unknown)
-- against what the index predicted at the grant (req.px). Fewer, beyond the last block vLLM
-- always computes again, is a miss: returns the request's hashes (kept by its grant), else
-- nil.
local function missedPrefix(req, cachedBlocks)
  local predicted = tonumber(req.px)
  if not predicted or not cachedBlocks or cachedBlocks + 1 >= predicted then return nil end
  local requestKey = requestPrefix .. req.id
  return rcall('HGET', requestKey, 'pxk')
end

-- After the release of a granted request whose prediction missed (`missed`: its hashes, from
-- missedPrefix): the pod evicted what its index still holds, so its index remembers too far
-- back. Its current generation ends now (renamed to the previous one, dropping the older
-- entries the prediction came from) and the request's hashes, which the pod holds now that
-- it has served them, start the new one. A pod no longer in the pool is left alone (its
-- index is gone). Returns the prediction, -1 when the grant made none.
local function correctPrefix(req, missed, cfg)
  local predicted = tonumber(req.px)
  if not predicted then return -1 end
  if not missed or not cfg.prefixEnabled then return predicted end
  if rcall('HEXISTS', podsKey, 'cap:' .. req.pod) == 0 then return predicted end
  local currentKey = prefixCurrentPrefix .. req.pod
  local previousKey = prefixPreviousPrefix .. req.pod
  if rcall('EXISTS', currentKey) == 1 then
    rcall('RENAME', currentKey, previousKey)
  else
    rcall('DEL', previousKey)
  end
  req.prefix, req.prefixHashes = missed, nil
  rcall('SADD', currentKey, unpack(prefixHashes(req)))
  rcall('PEXPIRE', currentKey, cfg.prefixTtlMs)
  return predicted
end
