--- @include "includes/expiry"
--[[
  Reclaims what nobody will end: waiting requests past their queue TTL (expired, owner
  told), leases past expiry (evicted, owner told) and the waiting requests of one replica
  whose liveness lapsed (cancelled: its clients are gone with it). The replica and its
  notice list are dropped once nothing of it waits. Each part handles at most
  cfg.janitorBatch entries per call, oldest first. Returns {expired, evicted, cancelled}.
]]
local function runJanitor(now, cfg)
  local expired, evicted, cancelled = 0, 0, 0
  local due = rcall('ZRANGEBYSCORE', queueDeadlinesKey, '-inf', now, 'LIMIT', 0, cfg.janitorBatch)
  for _, id in ipairs(due) do
    expireWaiting(readRequest(id))
    expired = expired + 1
  end
  local lapsed = rcall('ZRANGEBYSCORE', leasesKey, '-inf', now, 'LIMIT', 0, cfg.janitorBatch)
  for _, id in ipairs(lapsed) do
    evictGranted(readRequest(id))
    evicted = evicted + 1
  end
  local dead = rcall('ZRANGEBYSCORE', replicasKey, '-inf', now, 'LIMIT', 0, 1)[1]
  if dead then
    local waitingByReplicaKey = waitingByReplicaPrefix .. dead
    for _, id in ipairs(rcall('ZRANGE', waitingByReplicaKey, 0, cfg.janitorBatch - 1)) do
      endRequest(readRequest(id), 'cancelled')
      cancelled = cancelled + 1
    end
    if rcall('ZCARD', waitingByReplicaKey) == 0 then
      rcall('ZREM', replicasKey, dead)
      local noticesKey = noticesPrefix .. dead
      rcall('DEL', noticesKey)
    end
  end
  return { expired, evicted, cancelled }
end
