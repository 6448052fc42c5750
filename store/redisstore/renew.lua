-- Renew: set KEYS[1]'s TTL to ARGV[2] ms only if it holds ARGV[1]
-- (compare-and-pexpire). Returns 1, or 0 if not owned.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])
