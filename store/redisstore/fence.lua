-- The fence of a new ownership, put before the scripts that issue one
-- (after the int64 library).

-- lh_last returns the fence counter's value (false when it has none), or
-- raises the errors that stop a new fence, having written nothing: the
-- counter is not a decimal in 1 .. 2^63-1, or cannot rise further.
local function lh_last(fkey)
  local last = redis.call('GET', fkey)
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
-- clock, which is past every fence issued before.
local function lh_fence(last)
  local t = redis.call('TIME')
  local fence = t[1] .. string.format('%06d', tonumber(t[2]))
  if last and lh_cmp(last, fence) >= 0 then
    fence = lh_incr(last)
  end
  return fence
end
