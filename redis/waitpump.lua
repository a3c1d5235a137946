-- waitpump: renew a waiting ticket and run the grant pass.
--
-- KEYS:    the ticket's n lane keys, in lane order; then, only when some
--          lane lends (Borrow), the class key of each lane that lends, in
--          lane order (read, never written to).
-- ARGV[1]: the key prefix P. ARGV[2]: the token.
-- ARGV[3]: the ticket's lease in ms: a queued, unexpired ticket now
--          expires this long from now.
-- ARGV[4..3+n]: the limit in force on each lane.
-- ARGV[4+n]: "1" when those limits are new (Ticket.NewLimits): a
--          queued ticket is judged by them from now on, not by those it
--          joined with; else the ticket is renewed without being read.
-- ARGV[5+n..4+2*n]: the ticket's seats in each lane, as its join sent
--          them (for next_ms); absent: 1 in each lane.
-- Only when some lane lends (Borrow, as its join sent it; for next_ms; the
-- seats above are then sent even when all are 1): ARGV[5+2*n..4+3*n] each
-- lane's reserve and ARGV[5+3*n..4+4*n] its lend (0 where it lends
-- nothing), ARGV[5+4*n] n. n is #KEYS without Borrow (ARGV then holds
-- 4 + n or 4 + 2*n values), ARGV's last value with it (5 + 4*n values,
-- more than 4 + 2*#KEYS), as in acquire.lua.
--
-- Returns: {state, next_ms, waiting} as waitpass's where (3: the ticket
--          was dropped to make room), and the tickets waiting under P.
local now = now_ms()
local w = wkeys(ARGV[1])
local token = ARGV[2]
-- lanes: the lane keys (KEYS without Borrow); borrow: nil when absent.
local lanes, n, borrow = KEYS, #KEYS, nil
if #ARGV > 4 + 2 * n then
  n = tonumber(ARGV[#ARGV])
  lanes = {unpack(KEYS, 1, n)}
  borrow = borrow_args(5 + 2 * n, n)
end
local limits, seats = {}, nil
for i = 1, n do limits[i] = tonumber(ARGV[3 + i]) end
if ARGV[5 + n] then
  seats = {}
  for i = 1, n do seats[i] = tonumber(ARGV[4 + n + i]) end
end
-- The expiry lives in the index alone: renewing it reads no ticket. Only
-- new limits (rare: a config change, an adaptive step) read the ticket,
-- and rewrite it when they differ.
local e = redis.call('ZSCORE', w.e, token)
if e and tonumber(e) > now then
  redis.call('ZADD', w.e, now + tonumber(ARGV[3]), token)
  touch_lazily(w, 2 * tonumber(ARGV[3]))
  if ARGV[4 + n] == '1' then set_limits(w, token, limits) end
end
pass(w, now)
local res = where(w, token, lanes, now, limits, seats, borrow)
res[3] = redis.call('ZCARD', w.q)
return res
