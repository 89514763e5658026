-- Pool settings as written by configure-2.lua; nil until the pool has been configured.
local function loadConfig()
  local raw = rcall('HMGET', configKey, 'fairness', 'order', 'quantum', 'bandCapacity',
    'maxQueueDepth', 'queueTtlMs', 'leaseTtlMs', 'maxGrantsPerPass', 'janitorBatch')
  if not raw[1] then return nil end
  return {
    fairness = raw[1],
    order = raw[2],
    quantum = tonumber(raw[3]),
    bandCapacity = tonumber(raw[4]),
    maxQueueDepth = tonumber(raw[5]),
    queueTtlMs = tonumber(raw[6]),
    leaseTtlMs = tonumber(raw[7]),
    maxGrantsPerPass = tonumber(raw[8]),
    janitorBatch = tonumber(raw[9]),
  }
end
