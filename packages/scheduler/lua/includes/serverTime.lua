-- Milliseconds on the Redis server clock: the one clock every replica agrees on. Read once
-- per call: a call is atomic, so every rule in it sees the same instant (as each
-- LocalScheduler operation reads its clock once). The cache lives at the library's top
-- level, so every call starts by forgetting the previous call's instant (`@percall`).
local scriptNowMs = nil
local function resetServerTime()
  scriptNowMs = nil
end
--- @percall resetServerTime()
local function serverNowMs()
  if not scriptNowMs then
    local time = rcall('TIME')
    scriptNowMs = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  end
  return scriptNowMs
end
