-- The grant of a released key to its queue's head, put after the fence and
-- queue libraries.

-- lh_put sets key k, which holds a lock its owner is passing on, to tok for
-- ms. On a full server (maxmemory reached) Redis refuses a command that may
-- grow memory when it is a script's first write, and lets it through once
-- the script has written: a refused SET is followed by a DEL of k, which
-- frees what the SET takes again, so passing a lock on never fails for
-- memory it does not grow. Any other refusal is raised, as redis.call would.
local function lh_put(k, tok, ms)
  local r = redis.pcall('SET', k, tok, 'PX', ms)
  if r['err'] then
    if not string.find(r['err'], '^OOM') then
      error(r)
    end
    redis.call('DEL', k)
    redis.call('SET', k, tok, 'PX', ms)
  end
end

-- lh_grant gives key k, which its owner is giving up, to the queue's live
-- head when the head's entry asked for it (lh_join's grant) and the fence
-- counter fkey allows a new fence: k holds the head's token with a new
-- fence, for the TTL the head asked or the rest of its entry's stay if
-- that is shorter, the entry is removed, and the head's Store is told the
-- fence on its channel (its wake message, a space, the fence). It reports
-- whether it granted; when it did not, it wrote nothing.
--
-- The stay bounds the grant so that a head that died holds the key no longer
-- than its entry would have held the queue up. The waiter counts the lease
-- from the send time of the attempt the id names, which its entry's stay
-- was counted from at the latest, for at most that stay (docs/design.md §5).
local function lh_grant(k, fkey, q, h, head, now)
  local g = redis.call('HMGET', h, '  ' .. head, ' ' .. head, head)
  local ttl, id = string.match(g[1] or '', '^(%d+) (%S+)$')
  local wake, dl = g[2], tonumber(g[3])
  ttl = tonumber(ttl)
  local sp = wake and string.find(wake, ' ', 1, true)
  if not (ttl and sp and dl) or ttl < 1 or dl <= now then
    return false
  end
  local ok, last = pcall(lh_last, fkey)
  if not ok then
    return false -- a counter that stops a new fence: the head's own attempt reports it
  end
  local fence = lh_fence(last)
  lh_put(k, head, math.min(ttl, dl - now))
  redis.call('SET', fkey, fence)
  lh_remove(q, h, head)
  -- pcall: the grant is made; a refused PUBLISH leaves the head to find it
  -- by its next attempt (acquire.lua answers it with the fence).
  redis.pcall('PUBLISH', string.sub(wake, 1, sp - 1), string.sub(wake, sp + 1) .. ' ' .. fence .. ' ' .. id)
  return true
end
