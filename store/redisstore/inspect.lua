-- Inspect: {owner token or nil, PTTL of KEYS[1], last fence or nil}.
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}
