-- LeaveQueue: take ARGV[1] out of the queue of KEYS[1] (KEYS[2], KEYS[3];
-- queue.lua) and, when KEYS[1] is free, wake the queue's head (lh_wake), who
-- may have been waiting behind the leaver. With ARGV[2] '1' the leaver did
-- not get the key: if KEYS[1] holds its token, a grant to it it never took
-- (lh_grant), the key is released as release.lua does (lh_pass): granted to
-- the next live head that asked for it, or else freed with the head woken;
-- KEYS[4] is the fence counter. Returns 1, or 0 when ARGV[1] was neither queued nor
-- holding the key. Running it twice does no harm.
local queued = redis.call('ZSCORE', KEYS[2], ARGV[1])
if queued then
  lh_remove(KEYS[2], KEYS[3], ARGV[1])
end
local free = redis.call('EXISTS', KEYS[1]) == 0
-- pcall: a key of another type holds no token (WRONGTYPE is a table here).
if not free and ARGV[2] == '1' and redis.pcall('GET', KEYS[1]) == ARGV[1] then
  lh_pass(KEYS[1], KEYS[4], KEYS[2], KEYS[3], '')
  return 1
end
if not queued then
  return 0
end
if free and redis.call('EXISTS', KEYS[2]) == 1 then
  local head = lh_head(KEYS[2], KEYS[3], lh_now())
  if head then
    lh_wake(KEYS[3], head)
  end
end
return 1
