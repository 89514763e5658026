-- The leader lease: KEYS[1] (holder) and KEYS[2] (epoch counter) of every script that
-- includes this, bound per call (`@percall`).
local leaderKey
local leaderEpochKey
local function bindFenceKeys(KEYS)
  leaderKey = KEYS[1]
  leaderEpochKey = KEYS[2]
end
--- @percall bindFenceKeys(KEYS)

-- Whether `replica` holds the leader lease in `epoch` (the current one).
local function holdsFence(replica, epoch)
  return rcall('GET', leaderKey) == replica and rcall('GET', leaderEpochKey) == epoch
end
