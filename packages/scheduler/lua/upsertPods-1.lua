#!lua
--[[
  Creates or updates pods: capacity (most concurrent requests) and health. In-flight counts
  are left alone; an unhealthy pod or one over a lowered cap just gets no new grants.

  Input:
    KEYS[1] pods hash
    ARGV    groups of 3: pod, cap, healthy ('1' | '0')

  Output:
    number of pods written
]]
local rcall = redis.call
local podsKey = KEYS[1]

local written = 0
for i = 1, #ARGV, 3 do
  local pod = ARGV[i]
  rcall('HSET', podsKey, 'cap:' .. pod, ARGV[i + 1], 'healthy:' .. pod, ARGV[i + 2])
  rcall('HSETNX', podsKey, 'inflight:' .. pod, 0)
  written = written + 1
end
return written
