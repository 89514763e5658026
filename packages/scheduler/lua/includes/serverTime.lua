-- Milliseconds on the Redis server clock: the one clock every replica agrees on. Read once
-- per script run: a script is atomic, so every rule in it sees the same instant (as each
-- LocalScheduler operation reads its clock once).
local scriptNowMs = nil
local function serverNowMs()
  if not scriptNowMs then
    local time = rcall('TIME')
    scriptNowMs = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  end
  return scriptNowMs
end
