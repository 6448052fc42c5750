-- Acquire: take KEYS[1] for ARGV[1] (token) with a TTL of ARGV[2] ms, only if
-- it is absent, and issue the fence in the same atomic step.
-- KEYS[2] is the fence counter: it never expires and shares KEYS[1]'s slot.
-- Returns {1, fence as a decimal string} when acquired, {0, remaining ms of
-- the holder} when not, and an error reply, having written nothing, when the
-- counter is not a decimal in 1 .. 2^63-1 or cannot rise further.
local last = redis.call('GET', KEYS[2])
if last and not lh_int(last) then
  return redis.error_reply('LEASEHOLD_BADFENCE ' .. lh_show(last))
end
if last == LH_MAX then
  return redis.error_reply('LEASEHOLD_FENCE_EXHAUSTED ' .. last)
end
-- fence = max(last + 1, server time in microseconds): after the data is lost
-- (restart without persistence, FLUSHALL, failover to a lagging replica) the
-- counter restarts from the clock, which is past every fence issued before.
local t = redis.call('TIME')
local fence = t[1] .. string.format('%06d', tonumber(t[2]))
if last and lh_cmp(last, fence) >= 0 then
  fence = lh_incr(last)
end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0, redis.call('PTTL', KEYS[1])}
end
redis.call('SET', KEYS[2], fence)
return {1, fence}
