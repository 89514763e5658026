-- Bytewise a < b. Lua's `<` on strings uses strcoll, and redis-server sets LC_COLLATE from
-- its environment, so it would not match sorted-set (memcmp) order on every host.
local function bytesLess(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end
