-- Replica liveness: a replica is alive while its score (expiry) is in the future. Every
-- enqueue, poll and heartbeat of a replica proves it alive for another lease TTL.
local function touchReplica(replica, now, cfg)
  rcall('ZADD', replicasKey, now + cfg.leaseTtlMs, replica)
end

-- The replica's liveness expiry while it is alive, nil once it lapsed (or it never came).
local function replicaLiveness(replica, now)
  local expiry = tonumber(rcall('ZSCORE', replicasKey, replica))
  if expiry and expiry > now then return expiry end
  return nil
end

-- Appends a notice to a replica's list; the caller knows the replica is registered.
local function pushNotice(replica, notice)
  local noticesKey = noticesPrefix .. replica
  rcall('RPUSH', noticesKey, notice)
end

-- Takes up to `most` of a replica's notices, oldest first ({} when none): a poll's, and a
-- release's for the caller whose BLMPOP is outstanding.
local function popNotices(replica, most)
  local noticesKey = noticesPrefix .. replica
  return rcall('LPOP', noticesKey, most) or {}
end

-- Notices go only to replicas still registered: a reclaimed replica's list is gone and
-- pushing to it would leave an orphan list behind.
local function notifyReplica(replica, notice)
  if rcall('ZSCORE', replicasKey, replica) then pushNotice(replica, notice) end
end
