-- Acquire: take KEYS[1] for ARGV[1] (token) with a TTL of ARGV[2] ms, only if
-- it is absent, and issue the fence in the same atomic step.
-- KEYS[2] is the fence counter: it never expires and shares KEYS[1]'s slot.
-- Returns {1, fence} when acquired, {0, remaining ms of the holder} when not.
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0, redis.call('PTTL', KEYS[1])}
end
-- fence = max(last + 1, server time in microseconds): after the data is lost
-- (restart without persistence, FLUSHALL, failover to a lagging replica) the
-- counter restarts from the clock, which is past every fence issued before.
-- Microseconds since 1970 stay below 2^53 (exact in a Lua double) until 2255.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local fence = (tonumber(redis.call('GET', KEYS[2])) or 0) + 1
if now > fence then
  fence = now
end
-- %.0f: Lua's default number format would round a 16-digit fence.
redis.call('SET', KEYS[2], string.format('%.0f', fence))
return {1, fence}
