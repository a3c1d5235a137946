-- waitpump: renew a waiting ticket and run the grant pass.
--
-- KEYS:    the ticket's lane keys, in lane order.
-- ARGV[1]: the key prefix P. ARGV[2]: the token.
-- ARGV[3]: the ticket's lease in ms: a queued, unexpired ticket now
--          expires this long from now.
-- ARGV[4..3+#KEYS]: the limit in force on each lane.
-- ARGV[4+#KEYS]: "1" when those limits are new (Ticket.NewLimits): a
--          queued ticket is judged by them from now on, not by those it
--          joined with; else the ticket is renewed without being read.
--
-- Returns: {state, next_ms, waiting} as waitpass's where (3: the ticket
--          was dropped to make room), and the tickets waiting under P.
local now = now_ms()
local w = wkeys(ARGV[1])
local token = ARGV[2]
local limits = {}
for i = 1, #KEYS do limits[i] = tonumber(ARGV[3 + i]) end
-- The expiry lives in the index alone: renewing it reads no ticket. Only
-- new limits (rare: a config change, an adaptive step) read the ticket,
-- and rewrite it when they differ.
local e = redis.call('ZSCORE', w.e, token)
if e and tonumber(e) > now then
  redis.call('ZADD', w.e, now + tonumber(ARGV[3]), token)
  touch_lazily(w, 2 * tonumber(ARGV[3]))
  if ARGV[4 + #KEYS] == '1' then set_limits(w, token, limits) end
end
pass(w, now)
local res = where(w, token, KEYS, now, limits)
res[3] = redis.call('ZCARD', w.q)
return res
