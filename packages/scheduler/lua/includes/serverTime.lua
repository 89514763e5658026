-- Milliseconds on the Redis server clock: the one clock every replica agrees on.
local function serverNowMs()
  local time = rcall('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
