--- @include "includes/pods"
--[[
  LoRA-aware pod choice (docs/routing.md, *LoRA adapters*). A request may name a LoRA
  adapter (req:<id> field 'lora'). The adapters a pod holds are the hash lora:<pod>:
  adapter -> '0' when the leader's report listed it (the pod's /v1/models and
  vllm:lora_requests_info: setPodAdapters-1.lua), or the server ms a gateway loaded it there
  (kept by later reports for a while: the leader's view of /v1/models lags). A pod's adapter
  slots (vllm:lora_requests_info's max_lora) are the pods field 'lslots:<pod>'.
  LocalEngine.adapterPods in src/local/engine.ts is the TypeScript twin.

  With routing.lora on, a request for adapter A may go to:
  - the pods with room that hold A, when some healthy pod holds A; when none of those has
    room, nowhere: it waits, and probeFlow (ring.lua) passes its flow over for this pass as
    it does a tenant at quota, so the room goes to others;
  - when no healthy pod holds A, with routing.lora_load on: the pods with room and a free
    slot (adapters held < slots; a pod that never said has one), where the gateway loads A
    before the forward; nowhere (it waits) when none of those has room but some healthy
    pod has a free slot; any pod with room when no healthy pod has a free slot (vLLM
    registers more adapters than max_lora and swaps them in);
  - with routing.lora_load off, any pod with room (a pod answers 404 for an adapter it
    does not hold; the gateway never guesses).
  Then the prefix score or the least load picks among them (chooseRequestPod, prefix.lua).
]]

-- The pass's pods and config, for probeFlow's question (loraBeginPass; none outside a pass).
local loraPassPods = nil
local loraPassCfg = nil
local function resetLoraPass()
  loraPassPods, loraPassCfg = nil, nil
end
--- @percall resetLoraPass()

local function loraBeginPass(pods, cfg)
  loraPassPods, loraPassCfg = pods, cfg
end

-- The healthy pods that hold the request's adapter, in name order (asked once per request
-- table: nothing in a call changes what a pod holds).
local function adapterHolders(pods, req)
  local holders = req.adapterHolders
  if not holders then
    holders = {}
    local adapter = req.adapter
    for _, pod in ipairs(pods.list) do
      if pod.healthy then
        local adaptersKey = adaptersPrefix .. pod.name
        if rcall('HEXISTS', adaptersKey, adapter) == 1 then holders[#holders + 1] = pod end
      end
    end
    req.adapterHolders = holders
  end
  return holders
end

local function podHasAdapterSlot(pod)
  if not pod.loraSlots then return true end
  local adaptersKey = adaptersPrefix .. pod.name
  return rcall('HLEN', adaptersKey) < pod.loraSlots
end

-- The pods of `list` with room (and keep(pod) when given), as a pods table.
local function podsWithRoom(list, keep)
  local chosen, byName = {}, {}
  for _, pod in ipairs(list) do
    if podHasRoom(pod) and (not keep or keep(pod)) then
      chosen[#chosen + 1] = pod
      byName[pod.name] = pod
    end
  end
  return { list = chosen, byName = byName }
end

-- The pods the request may go to: `pods` itself when it names no adapter (or routing.lora
-- is off), the candidates above, or nil when it waits.
local function adapterPods(pods, req, cfg)
  local adapter = req.adapter
  if not cfg.loraEnabled or not adapter or adapter == '' then return pods end
  local holders = adapterHolders(pods, req)
  if #holders > 0 then
    local ready = podsWithRoom(holders)
    if #ready.list > 0 then return ready end
    return nil
  end
  if not cfg.loraLoad then return pods end
  local free = podsWithRoom(pods.list, podHasAdapterSlot)
  if #free.list > 0 then return free end
  for _, pod in ipairs(pods.list) do
    if pod.healthy and podHasAdapterSlot(pod) then return nil end
  end
  return pods
end

-- Whether a waiting request must wait for its adapter (probeFlow, inside a pass only): its
-- hinted pod has no room and no pod it may go to has.
local function adapterWaits(req)
  if not loraPassPods or not req.adapter or req.adapter == '' then return false end
  if req.hint ~= '' then
    local hinted = loraPassPods.byName[req.hint]
    if hinted and podHasRoom(hinted) then return false end
  end
  return adapterPods(loraPassPods, req, loraPassCfg) == nil
end

-- The pod chosen for a request that is granted now (chooseRequestPod): with routing.lora_load
-- on, a request for an adapter no healthy pod holds claims it on that pod, stamped with the
-- server ms, as a gateway's load will make it hold it, so the requests for it that follow go
-- there too (each replica's forward loads it once, the pod's 400 "already loaded" counting
-- as done) rather than loading it on a second pod. Returns `pod`.
local function claimAdapter(pod, req, cfg, now)
  -- adapterPods asked who holds it (req.adapterHolders) for a request naming an adapter.
  if pod and cfg.loraLoad and req.adapterHolders and #req.adapterHolders == 0 then
    local adaptersKey = adaptersPrefix .. pod.name
    rcall('HSET', adaptersKey, req.adapter, now)
  end
  return pod
end
