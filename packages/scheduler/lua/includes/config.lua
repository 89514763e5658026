--- @include "includes/serverTime"
--- @include "generated/settings"
-- Pool settings as written by configure-1.lua; nil until the pool has been configured.
-- Also applies the pool's test clock (includes/serverTime.lua), so a script loads its
-- config before it first asks for the time.
--
-- The parsed settings of the last read are kept at the library's top level with the
-- config's key and `rev`, which configure-1.lua makes new on every write (server time and
-- a counter): a call whose config is unchanged reads two fields instead of every setting
-- and builds no table (the whole read was ~14% of an enqueue+release pair's Redis time,
-- bench:scheduler). The field list and each field's fallback come from the settings table
-- (packages/core/src/scheduler-settings.ts) through the generated include above.
-- A config without a rev (written by a release before revs) is read whole every time. The
-- cached table is never modified by its users.
local cachedConfigOf, cachedConfigRev, cachedConfig = nil, nil, nil
local function loadConfig()
  local head = rcall('HMGET', configKey, 'rev', 'testClockMs')
  useTestClock(head[2])
  local rev = head[1]
  if rev and rev == cachedConfigRev and cachedConfigOf == configKey then return cachedConfig end
  local cfg = parseSettings(rcall('HMGET', configKey, unpack(settingsFields)))
  if not cfg then return nil end
  -- One generation of a pod's index: half the entries (prefixGenerationSize in core).
  cfg.prefixGeneration = math.ceil(cfg.prefixEntriesPerPod / 2)
  if rev then cachedConfigOf, cachedConfigRev, cachedConfig = configKey, rev, cfg end
  return cfg
end
