-- LeaveQueue: take ARGV[1] out of the queue of KEYS[1] (KEYS[2], KEYS[3];
-- queue.lua) and, when KEYS[1] is free, wake the queue's head (lh_wake), who
-- may have been waiting behind the leaver. Returns 1, or 0 when
-- ARGV[1] was not queued. Running it twice does no harm.
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  return 0
end
lh_remove(KEYS[2], KEYS[3], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 and redis.call('EXISTS', KEYS[2]) == 1 then
  local head = lh_head(KEYS[2], KEYS[3], lh_now())
  if head then
    lh_wake(KEYS[3], head)
  end
end
return 1
