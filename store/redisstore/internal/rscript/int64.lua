-- Exact int64 arithmetic on decimal strings. Lua numbers are doubles and stop
-- being exact at 2^53, so fences never pass through them whole.
local LH_MAX = '9223372036854775807'

-- lh_cmp compares two canonical non-negative decimals: -1, 0 or 1. Equal
-- lengths are compared in two chunks of at most 10 digits, each exact.
local function lh_cmp(a, b)
  if #a ~= #b then
    return #a < #b and -1 or 1
  end
  local x, y = tonumber(string.sub(a, 1, 10)), tonumber(string.sub(b, 1, 10))
  if x == y then
    x, y = tonumber(string.sub(a, 11)) or 0, tonumber(string.sub(b, 11)) or 0
  end
  if x == y then
    return 0
  end
  return x < y and -1 or 1
end

-- lh_int returns s when it is a canonical decimal in 1 .. 2^63-1, else nil.
local function lh_int(s)
  if type(s) ~= 'string' or not string.find(s, '^[1-9]%d*$') or #s > 19 then
    return nil
  end
  if #s == 19 and lh_cmp(s, LH_MAX) > 0 then
    return nil
  end
  return s
end

-- lh_incr returns s + 1 for a canonical positive decimal below 2^63-1.
local function lh_incr(s)
  local i = #s
  while string.byte(s, i) == 57 do -- '9'
    i = i - 1
  end
  if i == 0 then
    return '1' .. string.rep('0', #s)
  end
  return string.sub(s, 1, i - 1) .. string.char(string.byte(s, i) + 1) .. string.rep('0', #s - i)
end

-- lh_show quotes an untrusted stored value for an error reply, cut short.
local function lh_show(s)
  return string.format('%q', string.sub(tostring(s), 1, 32))
end

