-- Acquire: take KEYS[1] for ARGV[1] (token) with a TTL of ARGV[2] ms, only if
-- it is absent and no other waiter is ahead in its queue, and issue the fence
-- in the same atomic step.
-- KEYS[2] is the fence counter: it never expires and shares KEYS[1]'s slot.
-- KEYS[3] and KEYS[4] are the queue (queue.lua). ARGV[3] is 0, or the ms a
-- waiter's queue entry lives (it joins or refreshes it when refused), and
-- ARGV[4] then '' or how to wake it, ARGV[5] '' or the TTL a release may
-- grant it the key for and this attempt's id (lh_join). A waiter that finds
-- the key held by its own token (a grant, lh_grant, or a hand-off whose
-- word it missed) owns it: its TTL restarts at ARGV[2] ms, as a renewal's
-- would, and the answer is that ownership's fence (a new one only when the
-- counter was deleted).
-- Returns {1, fence as a decimal string} when acquired, {0, remaining ms of
-- the holder} when not (-2: not held, or the caller is behind the head), and
-- an error reply, having written nothing, when the counter is not a decimal
-- in 1 .. 2^63-1 or cannot rise further.
local tok, stay = ARGV[1], tonumber(ARGV[3])
-- pcall: a key of another type is no lock of this waiter's (WRONGTYPE is a
-- table here, never tok); the refusal below reports it as before.
if stay > 0 and redis.pcall('GET', KEYS[1]) == tok then
  local f = redis.call('GET', KEYS[2])
  if f ~= LH_MAX then -- the last fence is this ownership's: no new one needed
    f = lh_last(KEYS[2]) -- raises, having written nothing, on a counter that is not a decimal
    if not f then -- deleted by hand: restarted from the clock, as any fence
      f = lh_fence(false)
      redis.call('SET', KEYS[2], f)
    end
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if redis.call('EXISTS', KEYS[3]) == 1 then
    lh_remove(KEYS[3], KEYS[4], tok)
  end
  return {1, f}
end
local last = lh_last(KEYS[2])
local now, head, empty = false, false, true
if redis.call('EXISTS', KEYS[3]) == 1 then
  now = lh_now()
  head, empty = lh_head(KEYS[3], KEYS[4], now)
end
-- SET NX, not PTTL then SET: one call fewer on the path of every grant.
if (empty or head == tok) and redis.call('SET', KEYS[1], tok, 'NX', 'PX', ARGV[2]) then
  local fence = lh_fence(last)
  redis.call('SET', KEYS[2], fence)
  if head == tok then
    lh_remove(KEYS[3], KEYS[4], tok)
  end
  return {1, fence}
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl == -2 and head then
  -- Free, yet refused: the head may have missed its wake-up.
  lh_wake(KEYS[4], head)
end
if stay > 0 then
  lh_join(KEYS[3], KEYS[4], tok, now or lh_now(), stay, ARGV[4], ARGV[5] or '')
  if not empty and head ~= tok then
    return {0, -2} -- behind the head: no reason to try at the holder's expiry
  end
end
return {0, pttl}
