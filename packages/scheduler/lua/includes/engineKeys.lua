--[[
  The engine keyspace: every script that can run a dispatch pass takes these 18 KEYS in
  this order (ENGINE_KEY_ORDER in src/keys.ts; a test compares the two). Static keys are
  used as they are; a *Prefix key is a declared key name that carries the pool hash tag,
  and a data-dependent key is always `somePrefix .. suffix`, so every key a script touches
  is derived from KEYS and lands in the pool's slot.

  The names live at the function library's top level, shared by every helper; each call
  binds them to its own KEYS first (the `@percall` line: the build puts it at the top of
  every function that includes this file).
]]
local configKey
local ctlKey
local podsKey
local bandsKey
local deficitKey
local leasesKey
local queueDeadlinesKey
local replicasKey
local statsKey
local requestPrefix
local queuePrefix
local ringPrefix
local tenantPrefix
local noticesPrefix
local waitingByReplicaPrefix
local evictableKey
local sheddableKey
local sheddableByTenantPrefix
local function bindEngineKeys(KEYS)
  configKey = KEYS[1]               -- hash: pool settings
  ctlKey = KEYS[2]                  -- hash: budget and controller state (fenced writes),
                                    -- gauges inflight, waiting, waiting:<band>, seq,
                                    -- grantSeq, gateEvictedScrape
  podsKey = KEYS[3]                 -- hash: cap:<pod>, healthy:<pod>, inflight:<pod>,
                                    -- scraped waiting:/running:/kv:/scrapedAt:<pod>
  bandsKey = KEYS[4]                -- zset: bands whose ring is non-empty, score = band
  deficitKey = KEYS[5]              -- hash: <band>:<tenant> -> DRR deficit (iff in ring)
  leasesKey = KEYS[6]               -- zset: granted ids, score = lease expiry (ms)
  queueDeadlinesKey = KEYS[7]       -- zset: waiting ids, score = queue expiry (ms)
  replicasKey = KEYS[8]             -- zset: replica -> liveness expiry (ms)
  statsKey = KEYS[9]                -- hash: outcome counters
  requestPrefix = KEYS[10]          -- req:<id> hash
  queuePrefix = KEYS[11]            -- q:<band>:<tenant> zset
  ringPrefix = KEYS[12]             -- band:<band>:ring list
  tenantPrefix = KEYS[13]           -- tenant:<tenant> hash
  noticesPrefix = KEYS[14]          -- grants:<replica> list
  waitingByReplicaPrefix = KEYS[15] -- queued:<replica> zset, score = arrival seq
  evictableKey = KEYS[16]           -- zset: granted ids of bands < 0, score = sheddableScore
                                    -- (lowest band, then newest grant first)
  sheddableKey = KEYS[17]           -- zset: waiting ids of bands < 0, score = sheddableScore
                                    -- (lowest band, then newest arrival first)
  sheddableByTenantPrefix = KEYS[18] -- sheddable:<tenant> zset, the same per tenant
end
--- @percall bindEngineKeys(KEYS)
