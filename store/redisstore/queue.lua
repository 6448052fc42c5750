-- The FIFO queue of a key's waiters (driver.Queuer), put before the scripts
-- that use it. q is a ZSET of waiter tokens scored by arrival number; h is a
-- HASH of token -> deadline in server milliseconds, plus, for a waiter whose
-- Store watches turns, ' ' .. token -> that Store's channel, a space and the
-- message that wakes this waiter there, '  ' .. token -> the TTL in ms the
-- waiter asks a release to grant it the key for, a space and the id of the
-- attempt that asked (lh_grant; only with a channel), and the field ''
-- holding the last arrival number. (Tokens are printable ASCII without spaces: neither '' nor
-- a field starting with a space is one.) Both keys share the lock key's
-- slot, are deleted when the queue empties, and expire with their latest
-- entry.

-- LH_TRIM bounds the expired heads one call removes, so a call stays short
-- however many waiters died at once: K dead entries at the front take
-- ceil(K / LH_TRIM) calls on the key to clear, and every waiter's poll is
-- such a call.
local LH_TRIM = 16

-- lh_wake tells the waiter tok that its turn may have come, on its Store's
-- channel (lh_join), if it gave one. pcall: the caller's write is done; a
-- notification the server refuses (an ACL without this channel) must not
-- turn it into an error. Waiters fall back to their backoff.
local function lh_wake(h, tok)
  local v = redis.call('HGET', h, ' ' .. tok)
  local sp = v and string.find(v, ' ', 1, true)
  if sp then -- not a field of lh_join's (no space): nobody to wake, and no error after the caller's writes
    redis.pcall('PUBLISH', string.sub(v, 1, sp - 1), string.sub(v, sp + 1))
  end
end

local function lh_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- lh_head returns the token of the queue's live head, removing up to
-- LH_TRIM expired heads first, and whether the queue is empty. It returns
-- false, false when the queue still starts with expired entries after
-- LH_TRIM removals: no one may take the key in this call.
local function lh_head(q, h, now)
  for _ = 1, LH_TRIM do
    local tok = redis.call('ZRANGE', q, 0, 0)[1]
    if not tok then
      redis.call('DEL', h)
      return false, true
    end
    local dl = tonumber(redis.call('HGET', h, tok))
    if dl and dl > now then
      return tok, false
    end
    redis.call('ZREM', q, tok)
    redis.call('HDEL', h, tok, ' ' .. tok, '  ' .. tok)
  end
  if redis.call('ZCARD', q) == 0 then
    redis.call('DEL', h)
    return false, true
  end
  return false, false
end

-- lh_remove takes tok out of the queue, deleting both keys when it empties.
local function lh_remove(q, h, tok)
  redis.call('ZREM', q, tok)
  redis.call('HDEL', h, tok, ' ' .. tok, '  ' .. tok)
  if redis.call('ZCARD', q) == 0 then
    redis.call('DEL', h)
  end
end

-- lh_join puts tok at the back of the queue, or keeps its place, valid until
-- now + stay ms; wake is '' or its Store's channel, a space and the message
-- that wakes tok there (lh_wake), and grant '' or the TTL in ms a release
-- may grant tok the key for and the attempt's id (lh_grant), with a wake
-- only. The keys live as
-- long as their latest entry.
local function lh_join(q, h, tok, now, stay, wake, grant)
  if not redis.call('ZSCORE', q, tok) then
    redis.call('ZADD', q, redis.call('HINCRBY', h, '', 1), tok)
  end
  if wake ~= '' and grant ~= '' then
    redis.call('HSET', h, tok, now + stay, ' ' .. tok, wake, '  ' .. tok, grant)
  elseif wake ~= '' then
    redis.call('HSET', h, tok, now + stay, ' ' .. tok, wake)
    redis.call('HDEL', h, '  ' .. tok) -- its turn no longer watched: no grant
  else
    redis.call('HSET', h, tok, now + stay)
    redis.call('HDEL', h, ' ' .. tok, '  ' .. tok) -- nobody to wake, nor to grant
  end
  if redis.call('PTTL', q) < stay then
    redis.call('PEXPIRE', q, stay)
  end
  if redis.call('PTTL', h) < stay then
    redis.call('PEXPIRE', h, stay)
  end
end
