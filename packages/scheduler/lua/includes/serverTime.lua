-- Milliseconds on the Redis server clock: the one clock every replica agrees on. Read once
-- per call: a call is atomic, so every rule in it sees the same instant (as each
-- LocalScheduler operation reads its clock once). The cache lives at the library's top
-- level, so every call starts by forgetting the previous call's instant (`@percall`).
--
-- Test clock: a pool whose config hash has a `testClockMs` field runs on that frozen instant
-- instead of TIME (test/differential.test.ts drives both engines on one clock with it).
-- loadConfig and snapshot read the field with the config they already read, before any
-- rule asks for the time, so production (field absent) pays no extra Redis command.
local scriptNowMs = nil
-- Whether this call's config carried a test clock (useTestClock), so a later rule of the
-- same call need not ask the config again (includes/quiet.lua).
local scriptOnTestClock = false
local function resetServerTime()
  scriptNowMs = nil
  scriptOnTestClock = false
end
--- @percall resetServerTime()
local function serverNowMs()
  if not scriptNowMs then
    local time = rcall('TIME')
    scriptNowMs = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  end
  return scriptNowMs
end

-- Pins this call's instant to the pool's test clock, when the config has one.
local function useTestClock(testClockMs)
  if testClockMs then
    scriptNowMs = tonumber(testClockMs)
    scriptOnTestClock = true
  end
end

-- Whether the pool runs on a test clock; valid once the call has loaded its config.
local function onTestClock()
  return scriptOnTestClock
end
