-- repeatclaim: claim an idempotency key for a call, unless a call holds it.
--
-- KEYS[1]: the key's entry, a hash: s (r: running, d: done), t (the call's
--          token), c (its request id), f (the request's fingerprint),
--          a (the kept answer, when done).
-- ARGV[1]: the claiming call's token.
-- ARGV[2]: its request id.
-- ARGV[3]: its fingerprint.
-- ARGV[4]: the marker's life in ms (> 0).
-- ARGV[5]: "1": an entry that is done counts as none (mode auto).
--
-- Returns: {1} when claimed (the entry is the call's, running, expiring
--          after ARGV[4]); else {0, t, c, f, a or false} of the entry there,
--          unchanged.
local e = redis.call('HMGET', KEYS[1], 's', 't', 'c', 'f', 'a')
if e[1] and not (ARGV[5] == '1' and e[1] == 'd') then
  return {0, e[2] or '', e[3] or '', e[4] or '', e[1] == 'd' and (e[5] or '') or false}
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 's', 'r', 't', ARGV[1], 'c', ARGV[2], 'f', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {1}
