--- @include "includes/serverTime"
-- Pool settings as written by configure-2.lua; nil until the pool has been configured.
-- Also applies the pool's test clock (includes/serverTime.lua), so a script loads its
-- config before it first asks for the time.
--
-- The parsed settings of the last read are kept at the library's top level with the
-- config's key and `rev`, which configure-2.lua makes new on every write (server time and
-- a counter): a call whose config is unchanged reads two fields instead of 26 and builds no
-- table (the 21-field read was ~14% of an enqueue+release pair's Redis time, bench:scheduler).
-- A config without a rev (written by a release before revs) is read whole every time. The
-- cached table is never modified by its users.
local cachedConfigOf, cachedConfigRev, cachedConfig = nil, nil, nil
local function loadConfig()
  local head = rcall('HMGET', configKey, 'rev', 'testClockMs')
  useTestClock(head[2])
  local rev = head[1]
  if rev and rev == cachedConfigRev and cachedConfigOf == configKey then return cachedConfig end
  local raw = rcall('HMGET', configKey, 'fairness', 'dispatchOrder', 'quantum', 'bandCapacity',
    'maxQueueDepth', 'queueTtlMs', 'leaseTtlMs', 'maxGrantsPerPass', 'janitorBatch',
    'admissionPolicy', 'tierShedThreshold', 'tierShedMinPriority', 'queueDepthThreshold',
    'kvCacheUtilThreshold', 'staleMs', 'gatingEnabled', 'gatingDefaultCeiling',
    'gatingBandCeilings', 'queueShedding', 'inflightEviction', 'prefixEnabled', 'prefixWeight',
    'prefixPressureWeight', 'prefixEntriesPerPod', 'prefixTtlMs')
  if not raw[1] then return nil end
  local cfg = {
    fairness = raw[1],
    dispatchOrder = raw[2],
    quantum = tonumber(raw[3]),
    bandCapacity = tonumber(raw[4]),
    maxQueueDepth = tonumber(raw[5]),
    queueTtlMs = tonumber(raw[6]),
    leaseTtlMs = tonumber(raw[7]),
    maxGrantsPerPass = tonumber(raw[8]),
    janitorBatch = tonumber(raw[9]),
    admissionPolicy = raw[10] or 'always-admit',
    tierShedThreshold = tonumber(raw[11]),
    tierShedMinPriority = tonumber(raw[12]),
    queueDepthThreshold = tonumber(raw[13]),
    kvCacheUtilThreshold = tonumber(raw[14]),
    staleMs = tonumber(raw[15]),
    gatingEnabled = raw[16] == '1',
    gatingDefaultCeiling = tonumber(raw[17]),
    -- JSON object band -> ceiling; decoded only when a pass needs a gate.
    gatingBandCeilings = raw[18],
    queueShedding = raw[19] == '1',
    inflightEviction = raw[20] == '1',
    -- Prefix-aware pod choice (includes/prefix.lua); absent before it existed: off.
    prefixEnabled = raw[21] == '1',
    prefixWeight = tonumber(raw[22]) or 0,
    prefixPressureWeight = tonumber(raw[23]) or 0,
    -- One generation of a pod's index: half the entries (prefixGenerationSize in core).
    prefixGeneration = math.ceil((tonumber(raw[24]) or 2) / 2),
    prefixTtlMs = tonumber(raw[25]) or 3600000,
  }
  if rev then cachedConfigOf, cachedConfigRev, cachedConfig = configKey, rev, cfg end
  return cfg
end
