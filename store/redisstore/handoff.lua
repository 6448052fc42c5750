-- HandOff: end KEYS[1]'s ownership by ARGV[1] and, in the same step, give
-- the key to ARGV[2] for ARGV[3] ms with a new fence, if ARGV[2] may take a
-- free key: the queue (KEYS[3], KEYS[4]; queue.lua) is empty or ARGV[2] is
-- its live head, whose entry is then removed. Otherwise (or when ARGV[2]
-- is '') release as
-- release.lua does: grant the key to the live head when it asked for it
-- (lh_grant), else, when the queue has entries, wake channel ARGV[4] and the
-- head (lh_wake).
-- KEYS[2] is the fence counter.
-- Returns {0} when KEYS[1] does not hold ARGV[1] (nothing changed), {1,
-- fence as a decimal string} when handed over, {2, head or ''} when
-- released (or granted to head); an error reply when the counter stops a new fence, the key
-- still held by ARGV[1] (only expired queue entries may have been trimmed).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {0}
end
local head, empty, now = false, true, false
if redis.call('EXISTS', KEYS[3]) == 1 then
  now = lh_now()
  head, empty = lh_head(KEYS[3], KEYS[4], now)
end
if ARGV[2] ~= '' and (empty or head == ARGV[2]) then
  local fence = lh_fence(lh_last(KEYS[2]))
  lh_put(KEYS[1], ARGV[2], ARGV[3])
  redis.call('SET', KEYS[2], fence)
  if head then
    lh_remove(KEYS[3], KEYS[4], head)
  end
  return {1, fence}
end
if empty then
  redis.call('DEL', KEYS[1])
  return {2, ''} -- nobody queued: no PUBLISH, as release.lua
end
redis.pcall('PUBLISH', ARGV[4], '')
if head and lh_grant(KEYS[1], KEYS[2], KEYS[3], KEYS[4], head, now) then
  return {2, head}
end
redis.call('DEL', KEYS[1])
if head then
  lh_wake(KEYS[4], head)
  return {2, head}
end
return {2, ''}
