-- The passing of a key its owner gives up to its queue (release, leave),
-- put after the queue library and lh_grant.

-- lh_pass frees key k, which its owner is giving up: when its queue (q, h;
-- queue.lua) has entries, it first publishes on channel (unless it is ''),
-- then grants k to the live head if it asked (lh_grant; fkey is the fence
-- counter), else deletes k and wakes the head (lh_wake); with no queue it
-- deletes k alone.
local function lh_pass(k, fkey, q, h, channel)
  if redis.call('EXISTS', q) == 0 then
    redis.call('DEL', k)
    return
  end
  if channel ~= '' then
    -- pcall: the release is done; a notification the server refuses (an
    -- ACL without this channel) must not turn it into an error. Waiters
    -- fall back to their backoff.
    redis.pcall('PUBLISH', channel, '')
  end
  local now = lh_now()
  local head = lh_head(q, h, now)
  if head and lh_grant(k, fkey, q, h, head, now) then
    return
  end
  redis.call('DEL', k)
  if head then
    lh_wake(h, head)
  end
end
