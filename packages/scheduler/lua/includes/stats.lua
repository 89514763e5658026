-- Outcome counters, one field per (counter, tenant, class): '<counter>|<tenant>|<class>';
-- rejections add the numeric code: 'rejected|<tenant>|<class>|<code>'. Names and classes
-- never contain '|'. src/counters.ts parses the fields back.
local function countFlow(counter, tenant, sloClass, amount)
  rcall('HINCRBY', statsKey, counter .. '|' .. tenant .. '|' .. sloClass, amount or '1')
end

local function countRejection(tenant, sloClass, code)
  rcall('HINCRBY', statsKey, 'rejected|' .. tenant .. '|' .. sloClass .. '|' .. code, '1')
end
