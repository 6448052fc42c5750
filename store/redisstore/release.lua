-- Release: delete KEYS[1] only if it holds ARGV[1] (compare-and-delete), then
-- wake the waiters subscribed to channel ARGV[2]. Returns 1, or 0 if not owned.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
-- pcall: the release is done; a notification the server refuses (an ACL
-- without this channel) must not turn it into an error. Waiters fall back
-- to their backoff.
redis.pcall('PUBLISH', ARGV[2], '')
return 1
