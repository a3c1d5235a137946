-- repeatfinish: end a running call's hold on its idempotency key.
--
-- KEYS[1]: the key's entry (see repeatclaim.lua).
-- ARGV[1]: the call's token.
-- ARGV[2]: "1": keep the answer; "0": delete the entry.
-- ARGV[3]: the answer (with ARGV[2] "1").
-- ARGV[4]: how long the answer is kept, in ms (> 0).
--
-- Returns: 1 when the answer was kept; 0 otherwise. Nothing changes when
--          the entry is not the call's, running.
local e = redis.call('HMGET', KEYS[1], 's', 't')
if e[1] ~= 'r' or e[2] ~= ARGV[1] then
  return 0
end
if ARGV[2] ~= '1' then
  redis.call('DEL', KEYS[1])
  return 0
end
redis.call('HSET', KEYS[1], 's', 'd', 'a', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
