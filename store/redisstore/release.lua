-- Release: delete KEYS[1] only if it holds ARGV[1] (compare-and-delete), then
-- wake the head of its queue (KEYS[2], KEYS[3]; queue.lua) on channel
-- ARGV[2]: the message is the head's token, or '' when no one is queued,
-- which wakes every watcher. Returns 1, or 0 if not owned.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
local head = false
if redis.call('EXISTS', KEYS[2]) == 1 then
  head = lh_head(KEYS[2], KEYS[3], lh_now())
end
-- pcall: the release is done; a notification the server refuses (an ACL
-- without this channel) must not turn it into an error. Waiters fall back
-- to their backoff.
redis.pcall('PUBLISH', ARGV[2], head or '')
return 1
