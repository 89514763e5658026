#!lua
--[[
  Runs several engine calls in one FCALL, in the order given, each exactly as its own FCALL
  would run it: the same function (the library's `entryFunctions` table, scripts/build-lua.mjs)
  with its per-call state reset, its own reply, and an error of one call leaving the others
  to run. A gateway under load sends the releases, polls and heartbeats of one event-loop
  turn this way (src/redis/engine-batch.ts; an enqueue leaves alone, at once): one command
  to build, send, parse and answer instead of one per call, on the gateway's side and on
  Redis's. Atomic as a whole, as any script:
  no other client's command runs between two of the calls.

  Input:
    KEYS[1]  the pool's tag {fg:<pool>}: (passed on to every call)
    ARGV     per call: its name (enqueue | release | handover | poll | heartbeat | reclaim), its
             argument count n, then its n arguments

  Output:
    per call, in order: {1, reply} ({1} when the reply is nil), or {0, message} when the
    call raised an error or is not one of the engine's calls
]]
local rcall = redis.call

local batchable = {
  enqueue = true, release = true, handover = true, poll = true, heartbeat = true, reclaim = true,
}
local replies = {}
local at = 1
while at <= #ARGV do
  local name, count = ARGV[at], tonumber(ARGV[at + 1]) or 0
  local args = {}
  for i = 1, count do args[i] = ARGV[at + 1 + i] end
  at = at + 2 + count
  if batchable[name] then
    local ok, reply = pcall(entryFunctions[name], KEYS, args)
    if ok then
      replies[#replies + 1] = { 1, reply }
    else
      replies[#replies + 1] = { 0, type(reply) == 'table' and reply.err or tostring(reply) }
    end
  else
    replies[#replies + 1] = { 0, 'ERR ' .. tostring(name) .. ' is not an engine call' }
  end
end
return replies
