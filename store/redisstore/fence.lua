-- The fence of a new ownership, put before the scripts that issue one
-- (after the int64 library).

-- lh_last returns the fence counter's value (false when it has none), or
-- raises the errors that stop a new fence, having written nothing: the
-- counter is not a decimal in 1 .. 2^63-1 (a key of another type too), or
-- cannot rise further.
local function lh_last(fkey)
  local last = redis.pcall('GET', fkey)
  if type(last) == 'table' then
    error({err = 'LEASEHOLD_BADFENCE a key of type ' .. redis.call('TYPE', fkey).ok})
  end
  if last and not lh_int(last) then
    error({err = 'LEASEHOLD_BADFENCE ' .. lh_show(last)})
  end
  if last == LH_MAX then
    error({err = 'LEASEHOLD_FENCE_EXHAUSTED ' .. last})
  end
  return last
end

-- lh_fence returns the next fence after last: max(last + 1, server time in
-- microseconds). After the data is lost (restart without persistence,
-- FLUSHALL, failover to a lagging replica) the counter restarts from the
-- clock, which is past every fence issued before. It raises no error, so a
-- script may call it after its first write.
--
-- Below 9e15 (< 2^53, the clock's value until the year 2255) a counter is
-- compared as a Lua number, which is exact there; above, as a decimal
-- string (lh_cmp). Either way the fence itself is never a Lua number.
local function lh_fence(last)
  local t = redis.call('TIME')
  local s, us = t[1], t[2]
  local fence = s .. string.rep('0', 6 - #us) .. us
  if last then
    local n = tonumber(last)
    if n < 9e15 then
      if n >= tonumber(s) * 1000000 + tonumber(us) then
        fence = lh_incr(last)
      end
    elseif lh_cmp(last, fence) >= 0 then
      fence = lh_incr(last)
    end
  end
  return fence
end
