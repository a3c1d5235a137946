-- waitpump: renew a waiting ticket and run the grant pass.
--
-- KEYS:    the ticket's lane keys, in lane order.
-- ARGV[1]: the key prefix P. ARGV[2]: the token.
-- ARGV[3]: the ticket's lease in ms: a queued, unexpired ticket now
--          expires this long from now.
--
-- Returns: {state, next_ms} as waitpass's where (3: the ticket was
--          dropped to make room).
local now = now_ms()
local w = wkeys(ARGV[1])
local token = ARGV[2]
local raw = redis.call('HGET', w.t, token)
if raw then
  local tk = cjson.decode(raw)
  if tk.e > now then
    tk.e = now + tonumber(ARGV[3])
    redis.call('HSET', w.t, token, cjson.encode(tk))
    redis.call('ZADD', w.e, tk.e, token)
    touch(w, 2 * tonumber(ARGV[3]))
    local q = uq(w, tk.u)
    if redis.call('PTTL', q) < 2 * tonumber(ARGV[3]) then redis.call('PEXPIRE', q, 2 * tonumber(ARGV[3])) end
  end
end
pass(w, now)
return where(w, token, KEYS, now)
