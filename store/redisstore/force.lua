-- ForceRelease: delete the lock KEYS[1] whoever holds it and, in the same
-- step, append a record to its audit stream KEYS[3] (capped at ARGV[4]
-- entries), then wake waiters on channel ARGV[5] and the head of the key's
-- queue (KEYS[4], KEYS[5]; queue.lua; lh_wake). KEYS[2] is the
-- fence counter. ARGV: key, reason, by, cap, channel.
-- Returns false when KEYS[1] is not held, the error LEASEHOLD_NOTALOCK when
-- it is not a leasehold lock, else {token prefix, encoded
-- holder, fence, time in microseconds}.
local tok = redis.call('GET', KEYS[1])
if not tok then
  return false
end
-- Every acquire sets an expiry and a fence counter: a key without them is
-- an application's, not a lock, and is left alone.
local fence = redis.call('GET', KEYS[2])
if not fence or redis.call('PTTL', KEYS[1]) < 0 then
  return redis.error_reply('LEASEHOLD_NOTALOCK no expiry or no fence counter')
end
redis.call('DEL', KEYS[1])
local sep = string.find(tok, '~', 1, true)
local holder = ''
if sep then
  holder = string.sub(tok, sep + 1)
end
local prefix = string.sub(tok, 1, 10)
local t = redis.call('TIME')
local us = t[1] .. string.format('%06d', tonumber(t[2]))
redis.call('XADD', KEYS[3], 'MAXLEN', ARGV[4], '*',
  'time_us', us, 'key', ARGV[1], 'holder', holder, 'token', prefix,
  'fence', fence, 'reason', ARGV[2], 'by', ARGV[3])
redis.pcall('PUBLISH', ARGV[5], '')
if redis.call('EXISTS', KEYS[4]) == 1 then
  local head = lh_head(KEYS[4], KEYS[5], lh_now())
  if head then
    lh_wake(KEYS[5], head)
  end
end
return {prefix, holder, fence, us}
