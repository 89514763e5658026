--[[
  The engine keyspace: every script that can run a dispatch pass takes one KEY, the pool's
  tag `{fg:<pool>}:` (PoolKeys.tag in src/keys.ts), and derives every key name from it, as
  poolKeys does (a test compares the two). Redis Cluster routes the call by the tag's slot,
  and every key a script touches starts with the tag, so it lands in that slot; a
  data-dependent key is always `somePrefix .. suffix`. One declared key instead of one per
  name: ioredis builds, and Redis parses, 17 arguments fewer per call (~10 us of the
  gateway's CPU and ~3 us of Redis's per call on a 2-core VM, bench:scheduler).

  The names live at the function library's top level, shared by every helper. Each call
  binds them to its own tag first (the `@percall` line: the build puts it at the top of
  every function that includes this file); they are derived again only when the tag differs
  from the previous call's (another pool on the same server), being a function of the tag.
]]
local configKey
local ctlKey
local podsKey
local bandsKey
local deficitKey
local serviceKey
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
local prefixCurrentPrefix
local prefixPreviousPrefix
local adaptersPrefix
local boundTag
local function bindEngineKeys(KEYS)
  local tag = KEYS[1]
  if tag == boundTag then return end
  configKey = tag .. 'config'                   -- hash: pool settings
  ctlKey = tag .. 'ctl'                         -- hash: budget and controller state (fenced
                                                -- writes), gauges inflight, waiting,
                                                -- waiting:<band>, seq, grantSeq,
                                                -- gateEvictedScrape
  podsKey = tag .. 'pods'                       -- hash: cap:<pod>, healthy:<pod>,
                                                -- inflight:<pod>, scraped waiting:/running:/
                                                -- kv:/scrapedAt:<pod>
  bandsKey = tag .. 'bands'                     -- zset: bands whose ring is non-empty,
                                                -- score = band
  deficitKey = tag .. 'deficit'                 -- hash: <band>:<tenant> -> DRR deficit (iff
                                                -- in ring)
  serviceKey = tag .. 'vtc'                     -- hash: <band>:<tenant> -> service counter
                                                -- while not backlogged, <band>: -> the last
                                                -- leaver's (fairness in tokens, ring.lua)
  leasesKey = tag .. 'leases'                   -- zset: granted ids, score = lease expiry (ms)
  queueDeadlinesKey = tag .. 'qttl'             -- zset: waiting ids, score = queue expiry (ms)
  replicasKey = tag .. 'replicas'               -- zset: replica -> liveness expiry (ms)
  statsKey = tag .. 'stats'                     -- hash: outcome counters
  requestPrefix = tag .. 'req:'                 -- req:<id> hash
  queuePrefix = tag .. 'q:'                     -- q:<band>:<tenant> zset
  ringPrefix = tag .. 'band:'                   -- band:<band>:ring list, band:<band>:vtc
                                                -- zset (backlogged tenants by counter)
  tenantPrefix = tag .. 'tenant:'               -- tenant:<tenant> hash
  noticesPrefix = tag .. 'grants:'              -- grants:<replica> list
  waitingByReplicaPrefix = tag .. 'queued:'     -- queued:<replica> zset, score = arrival seq
  evictableKey = tag .. 'evictable'             -- zset: granted ids of bands < 0, score =
                                                -- sheddableScore (lowest band, then newest
                                                -- grant first)
  sheddableKey = tag .. 'sheddable'             -- zset: waiting ids of bands < 0, score =
                                                -- sheddableScore (lowest band, then newest
                                                -- arrival first)
  sheddableByTenantPrefix = tag .. 'sheddable:' -- sheddable:<tenant> zset, the same per tenant
  prefixCurrentPrefix = tag .. 'pxc:'           -- pxc:<pod> set: the current generation of
                                                -- the pod's prefix index (includes/prefix.lua)
  prefixPreviousPrefix = tag .. 'pxo:'          -- pxo:<pod> set: its previous generation
  adaptersPrefix = tag .. 'lora:'               -- lora:<pod> hash: LoRA adapter the pod holds
                                                -- -> '0' (listed) or the ms it was loaded
                                                -- (includes/lora.lua)
  boundTag = tag
end
--- @percall bindEngineKeys(KEYS)
