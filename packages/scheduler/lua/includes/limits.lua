--[[
  A tenant's budgets and rates over UTC windows: tokens per day and per month, requests per
  minute (the rules of src/tenant-limits.ts in @fairgate/core, on the server clock).
  limits:<tenant> hash: the limits tokensPerDay / tokensPerMonth / requestsPerMinute (absent
  = none; upsertTenants-3.lua writes them, and tenant:<t>.limited = '1' when any is set) and
  the counters of the windows last counted in: minuteId, minuteRequests, dayId, dayTokens,
  monthId, monthTokens. An admitted request keeps what it reserved in its req:<id> field
  lim = '<tokens>|<day id or empty>|<month id or empty>'.
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

-- The minute, day and month at `now` (limitWindows in core): ids and end instants.
local function limitWindows(now)
  local minuteId = math.floor(now / 60000)
  local dayId = math.floor(now / 86400000)
  local year, month = civilYearMonth(dayId)
  local nextStart
  if month == 12 then nextStart = monthStartDay(year + 1, 1) else nextStart = monthStartDay(year, month + 1) end
  return {
    minuteId = minuteId, minuteEnd = (minuteId + 1) * 60000,
    dayId = dayId, dayEnd = (dayId + 1) * 86400000,
    monthId = year * 12 + month - 1, monthEnd = nextStart * 86400000,
  }
end

-- A lim field's true-up to `actual` tokens: the difference, and the day and month ids it
-- reserved in ('' where none).
local function limDelta(lim, actual)
  local tokens, day, month = string.match(lim, '^(%d+)|(%d*)|(%d*)$')
  return actual - tonumber(tokens), day, month
end

-- The tenant's limits and counters as the current windows see them (currentCounters).
local function loadLimits(tenantName, windows)
  local limitsKey = limitsPrefix .. tenantName
  local raw = rcall('HMGET', limitsKey, 'tokensPerDay', 'tokensPerMonth',
    'requestsPerMinute', 'minuteId', 'minuteRequests', 'dayId', 'dayTokens', 'monthId',
    'monthTokens')
  local limits = {
    tokensPerDay = tonumber(raw[1]), tokensPerMonth = tonumber(raw[2]),
    requestsPerMinute = tonumber(raw[3]),
    minuteRequests = 0, dayTokens = 0, monthTokens = 0,
    -- The stored day and month counters, for settleLoaded.
    storedDayId = tonumber(raw[6]), storedDayTokens = tonumber(raw[7]) or 0,
    storedMonthId = tonumber(raw[8]), storedMonthTokens = tonumber(raw[9]) or 0,
  }
  if tonumber(raw[4]) == windows.minuteId then limits.minuteRequests = tonumber(raw[5]) end
  if limits.storedDayId == windows.dayId then limits.dayTokens = limits.storedDayTokens end
  if limits.storedMonthId == windows.monthId then limits.monthTokens = limits.storedMonthTokens end
  return limits
end

-- settleLimits on a loaded view (a handover: one read, one write), written by the
-- countLimits that follows: the stored counters of the windows the reservation was made in,
-- still theirs, move by the difference.
local function settleLoaded(limits, windows, lim, actual)
  local delta, day, month = limDelta(lim, actual)
  if delta == 0 then return end
  if day ~= '' and tonumber(day) == limits.storedDayId then
    limits.storedDayTokens = limits.storedDayTokens + delta
    if limits.storedDayId == windows.dayId then limits.dayTokens = limits.storedDayTokens end
    limits.daySettled = true
  end
  if month ~= '' and tonumber(month) == limits.storedMonthId then
    limits.storedMonthTokens = limits.storedMonthTokens + delta
    if limits.storedMonthId == windows.monthId then limits.monthTokens = limits.storedMonthTokens end
    limits.monthSettled = true
  end
end

-- The standing as the enqueue reply carries it (limitsStanding): request limit, remaining,
-- reset ms, then token limit, remaining, reset ms of the tighter window; -1 where none.
local function limitsStanding(limits, windows, now)
  local standing = { -1, -1, -1, -1, -1, -1 }
  if limits.requestsPerMinute then
    standing[1] = limits.requestsPerMinute
    standing[2] = math.max(0, limits.requestsPerMinute - limits.minuteRequests)
    standing[3] = windows.minuteEnd - now
  end
  local dayLeft, monthLeft
  if limits.tokensPerDay then dayLeft = math.max(0, limits.tokensPerDay - limits.dayTokens) end
  if limits.tokensPerMonth then
    monthLeft = math.max(0, limits.tokensPerMonth - limits.monthTokens)
  end
  -- The tighter window binds: less left, or on a tie the one that ends later (the month).
  if monthLeft and (not dayLeft or monthLeft <= dayLeft) then
    standing[4], standing[5], standing[6] = limits.tokensPerMonth, monthLeft, windows.monthEnd - now
  elseif dayLeft then
    standing[4], standing[5], standing[6] = limits.tokensPerDay, dayLeft, windows.dayEnd - now
  end
  return standing
end

-- Admission under the limits (admitUnderLimits in core), read only: nil and the windows
-- when the request may count, else Code.BudgetExhausted or Code.RequestRateLimited, the ms
-- until the refusing window ends, and the standing.
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

-- Appends an HSET field and its value to `fields`.
local function putField(fields, name, value)
  fields[#fields + 1] = name
  fields[#fields + 1] = value
end

-- Counts an admitted request (one request in its minute, `estimate` tokens in its day and
-- month, where limited) and returns its lim field. `limits` is updated to the counts after.
local function countLimits(tenantName, limits, windows, estimate)
  local fields = {}
  local day, month = '', ''
  if limits.requestsPerMinute then
    limits.minuteRequests = limits.minuteRequests + 1
    putField(fields, 'minuteId', windows.minuteId)
    putField(fields, 'minuteRequests', limits.minuteRequests)
  end
  if limits.tokensPerDay then
    limits.dayTokens = limits.dayTokens + estimate
    day = windows.dayId
    putField(fields, 'dayId', day)
    putField(fields, 'dayTokens', limits.dayTokens)
  elseif limits.daySettled then
    -- A settled window this count does not write (its limit is gone) keeps its settled count.
    putField(fields, 'dayTokens', limits.storedDayTokens)
  end
  if limits.tokensPerMonth then
    limits.monthTokens = limits.monthTokens + estimate
    month = windows.monthId
    putField(fields, 'monthId', month)
    putField(fields, 'monthTokens', limits.monthTokens)
  elseif limits.monthSettled then
    putField(fields, 'monthTokens', limits.storedMonthTokens)
  end
  local limitsKey = limitsPrefix .. tenantName
  if #fields > 0 then rcall('HSET', limitsKey, unpack(fields)) end
  return estimate .. '|' .. day .. '|' .. month
end

-- Trues a request's reservation (its lim field) up to `actual` tokens, 0 giving it back
-- (settleCharge): in each window it reserved in that is still the counters' own.
local function settleLimits(tenantName, lim, actual)
  local delta, day, month = limDelta(lim, actual)
  if delta == 0 then return end
  local limitsKey = limitsPrefix .. tenantName
  local ids = rcall('HMGET', limitsKey, 'dayId', 'monthId')
  if day ~= '' and ids[1] == day then rcall('HINCRBY', limitsKey, 'dayTokens', delta) end
  if month ~= '' and ids[2] == month then rcall('HINCRBY', limitsKey, 'monthTokens', delta) end
end

-- An admission refused after it counted, in the same call (a full queue): all of it back.
local function undoLimits(tenantName, limits, lim)
  settleLimits(tenantName, lim, 0)
  if limits.requestsPerMinute then
    local limitsKey = limitsPrefix .. tenantName
    rcall('HINCRBY', limitsKey, 'minuteRequests', '-1')
  end
end
