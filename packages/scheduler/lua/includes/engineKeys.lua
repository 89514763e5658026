--[[
  The engine keyspace: every script that can run a dispatch pass takes these 18 KEYS in
  this order (ENGINE_KEY_ORDER in src/keys.ts; a test compares the two). Static keys are
  used as they are; a *Prefix key is a declared key name that carries the pool hash tag,
  and a data-dependent key is always `somePrefix .. suffix`, so every key a script touches
  is derived from KEYS and lands in the pool's slot.
]]
local configKey = KEYS[1]               -- hash: pool settings
local ctlKey = KEYS[2]                  -- hash: budget and controller state (fenced writes),
                                        -- gauges inflight, waiting, waiting:<band>, seq,
                                        -- grantSeq, gateEvictedScrape
local podsKey = KEYS[3]                 -- hash: cap:<pod>, healthy:<pod>, inflight:<pod>,
                                        -- scraped waiting:/running:/kv:/scrapedAt:<pod>
local bandsKey = KEYS[4]                -- zset: bands whose ring is non-empty, score = band
local deficitKey = KEYS[5]              -- hash: <band>:<tenant> -> DRR deficit (iff in ring)
local leasesKey = KEYS[6]               -- zset: granted ids, score = lease expiry (ms)
local queueDeadlinesKey = KEYS[7]       -- zset: waiting ids, score = queue expiry (ms)
local replicasKey = KEYS[8]             -- zset: replica -> liveness expiry (ms)
local statsKey = KEYS[9]                -- hash: outcome counters
local requestPrefix = KEYS[10]          -- req:<id> hash
local queuePrefix = KEYS[11]            -- q:<band>:<tenant> zset
local ringPrefix = KEYS[12]             -- band:<band>:ring list
local tenantPrefix = KEYS[13]           -- tenant:<tenant> hash
local noticesPrefix = KEYS[14]          -- grants:<replica> list
local waitingByReplicaPrefix = KEYS[15] -- queued:<replica> zset, score = arrival seq
local evictableKey = KEYS[16]           -- zset: granted ids of bands < 0, score = sheddableScore
                                        -- (lowest band, then newest grant first)
local sheddableKey = KEYS[17]           -- zset: waiting ids of bands < 0, score = sheddableScore
                                        -- (lowest band, then newest arrival first)
local sheddableByTenantPrefix = KEYS[18] -- sheddable:<tenant> zset, the same per tenant
