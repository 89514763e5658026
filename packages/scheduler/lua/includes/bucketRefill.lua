-- The refill rule of the per-tenant token bucket (includes/bucket.lua), on its own: pure,
-- no keys, so a script outside the engine keyspace (upsertTenants) can use it.
-- The level (milli-tokens) and its timestamp at `now` (currentBucket / refill in core).
local function refilledBucket(capacity, refill, level, at, now)
  local capacityMilli = capacity * 1000
  if not level then return capacityMilli, now end
  local elapsed = math.max(0, now - at)
  return math.min(capacityMilli, level + elapsed * refill), math.max(now, at)
end
