--[[
  A tenant's budgets and rates over UTC windows: tokens per day and per month, requests per
  minute (the rules of src/tenant-limits.ts in @fairgate/core, on the server clock).
  They live in the tenant:<tenant> hash (includes/tenants.lua reads them with the rest of
  the tenant, loadTenant(name, true)): the limits tokensPerDay / tokensPerMonth /
  requestsPerMinute (absent = none; upsertTenants-2.lua writes them) and the counters of the
  windows last counted in: minuteId, minuteRequests, dayId, dayTokens, monthId, monthTokens.
  An admitted request keeps what it reserved in its req:<id> field
  lim = '<tokens>|<day id or empty>|<month id or empty>'.
  Window ids are compared and written as the text Redis stores (every Lua number redis.call
  sends is formatted with snprintf, includes/requests.lua), and a request's counts are
  written by one HSET: each redis.call costs more than the numbers it formats.
]]

-- The day number's civil (UTC) year and month (civilFromDays in core).
local function civilYearMonth(days)
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local month = mp < 10 and mp + 3 or mp - 9
  local year = yoe + era * 400
  if month <= 2 then year = year + 1 end
  return year, month
end

-- The day number of the first day of a civil month (daysFromCivil in core, day 1).
local function monthStartDay(year, month)
  local y = year
  if month <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mShifted = month + 9
  if month > 2 then mShifted = month - 3 end
  local doy = math.floor((153 * mShifted + 2) / 5)
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

-- The windows of the minute last asked for: a day and a month start on a minute, so every
-- instant of one minute has the same windows (kept across calls at the library's top level).
local windowsOfMinute = nil

-- The minute, day and month at `now` (limitWindows in core): ids (numbers, and as text for
-- the hash) and end instants.
local function limitWindows(now)
  local minuteId = math.floor(now / 60000)
  local cached = windowsOfMinute
  if cached and cached.minuteId == minuteId then return cached end
  local dayId = math.floor(now / 86400000)
  local year, month = civilYearMonth(dayId)
  local nextStart
  if month == 12 then nextStart = monthStartDay(year + 1, 1) else nextStart = monthStartDay(year, month + 1) end
  local monthId = year * 12 + month - 1
  windowsOfMinute = {
    minuteId = minuteId, minuteText = tostring(minuteId), minuteEnd = (minuteId + 1) * 60000,
    dayText = tostring(dayId), dayEnd = (dayId + 1) * 86400000,
    monthText = tostring(monthId), monthEnd = nextStart * 86400000,
  }
  return windowsOfMinute
end

-- A tenant's limits and counters as the current windows see them, from the row
-- loadTenant(name, true) read (fields 12-20: the limits, then the counters).
local function loadLimits(tenantName, row, windows)
  local limits = {
    tenant = tenantName,
    tokensPerDay = tonumber(row[12]), tokensPerMonth = tonumber(row[13]),
    requestsPerMinute = tonumber(row[14]),
    minuteRequests = 0, dayTokens = 0, monthTokens = 0,
    -- The windows the stored counters are of.
    minuteCurrent = row[15] == windows.minuteText,
    dayCurrent = row[17] == windows.dayText,
    monthCurrent = row[19] == windows.monthText,
  }
  if limits.minuteCurrent then limits.minuteRequests = tonumber(row[16]) end
  if limits.dayCurrent then limits.dayTokens = tonumber(row[18]) end
  if limits.monthCurrent then limits.monthTokens = tonumber(row[20]) end
  return limits
end

-- Appends the standing to `reply` (limitsStanding in core): request limit, remaining, reset
-- ms, then token limit, remaining, reset ms of the tighter window; -1 where none.
local function appendStanding(reply, limits, windows, now)
  local n = #reply
  if limits.requestsPerMinute then
    reply[n + 1] = limits.requestsPerMinute
    reply[n + 2] = math.max(0, limits.requestsPerMinute - limits.minuteRequests)
    reply[n + 3] = windows.minuteEnd - now
  else
    reply[n + 1], reply[n + 2], reply[n + 3] = -1, -1, -1
  end
  local dayLeft, monthLeft
  if limits.tokensPerDay then dayLeft = math.max(0, limits.tokensPerDay - limits.dayTokens) end
  if limits.tokensPerMonth then
    monthLeft = math.max(0, limits.tokensPerMonth - limits.monthTokens)
  end
  -- The tighter window binds: less left, or on a tie the one that ends later (the month).
  if monthLeft and (not dayLeft or monthLeft <= dayLeft) then
    reply[n + 4], reply[n + 5], reply[n + 6] = limits.tokensPerMonth, monthLeft, windows.monthEnd - now
  elseif dayLeft then
    reply[n + 4], reply[n + 5], reply[n + 6] = limits.tokensPerDay, dayLeft, windows.dayEnd - now
  else
    reply[n + 4], reply[n + 5], reply[n + 6] = -1, -1, -1
  end
  return reply
end

-- Admission under the limits (admitUnderLimits in core), read only: nil when the request
-- may count, else Code.BudgetExhausted or Code.RequestRateLimited and the ms until the
-- refusing window ends.
local function checkLimits(limits, windows, now)
  local budgetEnd = 0
  if limits.tokensPerDay and limits.dayTokens >= limits.tokensPerDay then
    budgetEnd = windows.dayEnd
  end
  if limits.tokensPerMonth and limits.monthTokens >= limits.tokensPerMonth then
    budgetEnd = math.max(budgetEnd, windows.monthEnd)
  end
  if budgetEnd > 0 then
    return Code.BudgetExhausted, budgetEnd - now
  end
  if limits.requestsPerMinute and limits.minuteRequests >= limits.requestsPerMinute then
    return Code.RequestRateLimited, windows.minuteEnd - now
  end
  return nil
end

-- A lim field's true-up to `actual` tokens: the difference, and the day and month ids it
-- reserved in (text; '' where none).
local function limDelta(lim, actual)
  local tokens, day, month = string.match(lim, '^(%d+)|(%d*)|(%d*)$')
  return actual - tonumber(tokens), day, month
end

-- Appends an HSET field and its value to `fields`.
local function putField(fields, name, value)
  fields[#fields + 1] = name
  fields[#fields + 1] = value
end

-- Counts an admitted request (one request in its minute, `estimate` tokens, as text ('' or
-- nil = 0), in its day and month, where limited) and returns its lim field. `settle`, when given, is the
-- finished request's lim field and its actual tokens (a handover): its true-up goes in with
-- the count where it reserved in the current window. One HSET writes the counts after (and
-- a window's id where it starts again); `limits` holds them.
local function countLimits(limits, windows, estimate, settle, actual)
  if not estimate or estimate == '' then estimate = '0' end
  local delta, settleDay, settleMonth = 0, '', ''
  if settle then delta, settleDay, settleMonth = limDelta(settle, actual) end
  local tokens = tonumber(estimate)
  local fields = {}
  if limits.requestsPerMinute then
    limits.minuteRequests = limits.minuteRequests + 1
    if not limits.minuteCurrent then putField(fields, 'minuteId', windows.minuteText) end
    putField(fields, 'minuteRequests', limits.minuteRequests)
  end
  -- A true-up of a window that is not the current one changes nothing that is read again.
  local dayDelta = (delta ~= 0 and settleDay == windows.dayText and limits.dayCurrent) and delta or 0
  local day = ''
  if limits.tokensPerDay then
    day = windows.dayText
    limits.dayTokens = limits.dayTokens + tokens + dayDelta
    if not limits.dayCurrent then putField(fields, 'dayId', day) end
    putField(fields, 'dayTokens', limits.dayTokens)
  elseif dayDelta ~= 0 then
    -- A limit removed since the reservation: its counter is trued up all the same.
    putField(fields, 'dayTokens', limits.dayTokens + dayDelta)
  end
  local monthDelta =
    (delta ~= 0 and settleMonth == windows.monthText and limits.monthCurrent) and delta or 0
  local month = ''
  if limits.tokensPerMonth then
    month = windows.monthText
    limits.monthTokens = limits.monthTokens + tokens + monthDelta
    if not limits.monthCurrent then putField(fields, 'monthId', month) end
    putField(fields, 'monthTokens', limits.monthTokens)
  elseif monthDelta ~= 0 then
    putField(fields, 'monthTokens', limits.monthTokens + monthDelta)
  end
  if #fields > 0 then
    local tenantKey = tenantPrefix .. limits.tenant
    rcall('HSET', tenantKey, unpack(fields))
  end
  return estimate .. '|' .. day .. '|' .. month
end

-- Trues a request's reservation (its lim field) up to `actual` tokens, 0 giving it back
-- (settleCharge): in each window it reserved in that is still the counters' own.
local function settleLimits(tenantName, lim, actual)
  local delta, day, month = limDelta(lim, actual)
  if delta == 0 then return end
  local tenantKey = tenantPrefix .. tenantName
  local ids = rcall('HMGET', tenantKey, 'dayId', 'monthId')
  if day ~= '' and ids[1] == day then rcall('HINCRBY', tenantKey, 'dayTokens', delta) end
  if month ~= '' and ids[2] == month then rcall('HINCRBY', tenantKey, 'monthTokens', delta) end
end

-- An admission refused after it counted, in the same call (a full queue): all of it back
-- (by increments: the dispatch pass in between may have given back others' reservations).
local function undoLimits(limits, lim)
  local tenantKey = tenantPrefix .. limits.tenant
  if limits.requestsPerMinute then rcall('HINCRBY', tenantKey, 'minuteRequests', '-1') end
  local delta = limDelta(lim, 0)
  if delta == 0 then return end
  if limits.tokensPerDay then rcall('HINCRBY', tenantKey, 'dayTokens', delta) end
  if limits.tokensPerMonth then rcall('HINCRBY', tenantKey, 'monthTokens', delta) end
end
