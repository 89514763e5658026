#!lua
--[[
  A replica's health check of pods: sets 'healthy:<pod>' of pods that exist and are not
  leaving. It never creates a pod, nor brings back one that discovery dropped (syncPods-7):
  a replica whose own view lags the leader's cannot undo it.

  Input:
    KEYS[1] pods hash
    ARGV    groups of 2: pod, healthy ('1' | '0')

  Output:
    number of pods written
]]
local rcall = redis.call
local podsKey = KEYS[1]

local written = 0
for i = 1, #ARGV, 2 do
  local pod = ARGV[i]
  if rcall('HEXISTS', podsKey, 'cap:' .. pod) == 1
    and rcall('HEXISTS', podsKey, 'leaving:' .. pod) == 0 then
    rcall('HSET', podsKey, 'healthy:' .. pod, ARGV[i + 1])
    written = written + 1
  end
end
return written
