-- Release: delete KEYS[1] only if it holds ARGV[1] (compare-and-delete), and
-- when its queue (KEYS[2], KEYS[3]; queue.lua) has a live head that asked
-- for it, grant the key to that head in the same step (lh_pass, lh_grant;
-- KEYS[4] is the fence counter). When the queue has entries it wakes the
-- waiters subscribed to channel ARGV[2] too, and the queue's head
-- (lh_wake) if it did not grant, so no other queued waiter receives
-- anything. A key nobody queues for is released without a PUBLISH
-- (driver.ReleaseNotifier allows it: a Client waits in the queue). Returns
-- 1, or 0 if not owned.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
lh_pass(KEYS[1], KEYS[4], KEYS[2], KEYS[3], ARGV[2])
return 1
