-- repeattouch: keep a running call's idempotency marker alive.
--
-- KEYS[1]: the key's entry (see repeatclaim.lua).
-- ARGV[1]: the call's token.
-- ARGV[2]: the marker's life from now, in ms (> 0).
--
-- Returns: 1 when the entry is the call's and running (its expiry set to
--          now + ARGV[2]); else 0, nothing changed.
local e = redis.call('HMGET', KEYS[1], 's', 't')
if e[1] == 'r' and e[2] == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
