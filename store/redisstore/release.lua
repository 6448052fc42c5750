-- Release: delete KEYS[1] only if it holds ARGV[1] (compare-and-delete), then,
-- when its queue (KEYS[2], KEYS[3]; queue.lua) has entries, wake the waiters
-- subscribed to channel ARGV[2] and the queue's head (lh_wake), so no other
-- queued waiter receives anything. A key nobody queues for is released
-- without a PUBLISH (driver.ReleaseNotifier allows it: a Client waits in the
-- queue). Returns 1, or 0 if not owned.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[2]) == 0 then
  return 1
end
local head = lh_head(KEYS[2], KEYS[3], lh_now())
-- pcall: the release is done; a notification the server refuses (an ACL
-- without this channel) must not turn it into an error. Waiters fall back
-- to their backoff.
redis.pcall('PUBLISH', ARGV[2], '')
if head then
  lh_wake(KEYS[3], head)
end
return 1
