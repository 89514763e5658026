-- Whether `replica` holds the leader lease in `epoch` (the current one). Uses the leaderKey
-- and leaderEpochKey locals of the including script.
local function holdsFence(replica, epoch)
  return rcall('GET', leaderKey) == replica and rcall('GET', leaderEpochKey) == epoch
end
