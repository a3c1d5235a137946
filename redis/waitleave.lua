-- waitleave: take a ticket off the waitlist.
--
-- KEYS:    the ticket's lane keys. ARGV[1]: the key prefix P.
-- ARGV[2]: the token.
--
-- Returns: 1 when the ticket had been granted (the token holds an
--          unexpired lease in every key; its other seats come with it),
--          else 0.
local now = now_ms()
local w = wkeys(ARGV[1])
local token = ARGV[2]
local raw = redis.call('HGET', w.t, token)
if raw then
  remove_ticket(w, token, cjson.decode(raw), false)
  reset_if_empty(w)
  return 0
end
redis.call('DEL', xk(w, token))
if holds(KEYS, token, now) then return 1 end
return 0
