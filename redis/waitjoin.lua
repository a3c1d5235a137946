-- waitjoin: join the waitlist, or take the leases at once when nobody waits
-- on the call's lanes (exactly as acquire.lua without force, but that a
-- lane lends nothing while a ticket waits on its class key).
--
-- KEYS:    the call's n lane keys, in lane order; then, only when some lane
--          lends (Borrow), the class key of each lane that lends, in lane
--          order (read, never written to).
-- ARGV[1]: the key prefix P (the waitlist's keys are P:wait:*).
-- ARGV[2]: the lease token.
-- ARGV[3]: the call's lease in ms, when taken at once.
-- ARGV[4]: not-after, Unix ms by the caller's clock; "0" for none.
-- ARGV[5]: the ticket's lease in ms.
-- ARGV[6]: a grant's claim time in ms.
-- ARGV[7]: max tickets waiting under P; ARGV[8]: max per user.
-- ARGV[9]: the user id. ARGV[10]: the channel to PUBLISH the token to
--          when the ticket is granted.
-- ARGV[11]: the ticket's fairness (Ticket.Fair): 0 calls, 1 time, 2
--          usage; taken out of ARGV first, so the positions below are
--          counted without it.
-- ARGV[11..10+n]: the limit of each lane for this call (0 only where the
--          lane lends).
-- ARGV[11+n]: 1 + the index of the user's own lane in KEYS; 0: none.
-- ARGV[12+n..11+2*n]: the seats the call takes in each lane (each >= 1);
--          absent: 1 in each lane.
-- Only when some lane lends (Borrow; the seats above are then sent even
-- when all are 1): ARGV[12+2*n..11+3*n] each lane's reserve and
-- ARGV[12+3*n..11+4*n] its lend (0 where it lends nothing), ARGV[12+4*n]
-- n. n is #KEYS without Borrow (ARGV then holds 11 + n or 11 + 2*n
-- values), ARGV's last value with it (12 + 4*n values, more than 11 +
-- 2*#KEYS), as in acquire.lua.
--
-- Returns: {-1} when run after not-after (nothing done); otherwise
--          {state, next_ms, count_1, ..., count_n, class_1, ..., class_m}:
--          state 1 = holds the leases (at once, or granted by the pass
--          this join ran), 2 = queued, 0 = neither (no room to wait). A
--          full list makes room by dropping the newest ticket of the user
--          holding the most (drop_longest) when that user holds more than
--          this one + 1; next_ms as in waitpass's where; count_i = the
--          unexpired leases (seats) in KEYS[i] before, class_j those in
--          the j-th class key (KEYS[n+j]). A lane's limit for the call is
--          its own + what it lends (lent: nothing while a ticket waits on
--          its class key), wherever this script judges the call. A call
--          turned away from a full list takes no seat the pass set aside.
--          A ticket costs its largest seats value: its user's finish tag
--          becomes its start tag + that; a ticket of fair work (fb 1 or 2)
--          gets S = max(V, F + the user's provisional charge) and costs
--          its estimate (waitpass's fair_*), and a call it takes at once
--          is recorded as running.
local fb = tonumber(table.remove(ARGV, 11))
local now = now_ms()
local notafter = tonumber(ARGV[4])
if notafter > 0 and now > notafter then return {-1} end

local w = wkeys(ARGV[1])
local token, lease = ARGV[2], tonumber(ARGV[3])
local maxw, maxu, user = tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9]
-- lanes: the lane keys (KEYS without Borrow); borrow: nil when absent,
-- else per lane {class key, reserve, lend} (borrow_args).
local lanes, n, borrow = KEYS, #KEYS, nil
if #ARGV > 11 + 2 * n then
  n = tonumber(ARGV[#ARGV])
  lanes = {unpack(KEYS, 1, n)}
  borrow = borrow_args(12 + 2 * n, n)
end
-- seats: nil when absent (1 in each lane); cost: the largest.
local seats, cost = nil, 1
if ARGV[12 + n] then
  seats = {}
  for i = 1, n do
    seats[i] = tonumber(ARGV[11 + n + i])
    if seats[i] > cost then cost = seats[i] end
  end
end

local busy = false
if redis.call('EXISTS', w.q) == 1 then
  drop_expired(w, now)
  for _, k in ipairs(lanes) do
    if tonumber(redis.call('HGET', w.n, k) or '0') > 0 then busy = true end
  end
end

local res = {0, 0}
-- lends returns what each lane lends the call now (borrow is set; the
-- class keys' counts go to res after the lanes').
local function lends()
  local l, j = {}, 0
  for i = 1, n do
    l[i] = 0
    if borrow[i][1] ~= '' then
      j = j + 1
      local c = count(borrow[i][1], now)
      res[n + 2 + j] = c
      l[i] = lent(w, borrow[i], c)
    end
  end
  return l
end
local more = borrow and lends() -- nil when no lane lends
local fits = true
for i, k in ipairs(lanes) do
  local c = count(k, now)
  res[i + 2] = c
  if c + (seats and seats[i] or 1) > tonumber(ARGV[10 + i]) + (more and more[i] or 0) then fits = false end
end
local function take()
  for i, k in ipairs(lanes) do add(k, token, now, lease, seats and seats[i]) end
  fair_lift(w, user, fb, now)
  fair_start(w, token, user, cost, 0, fb, false, now, lanes[1])
  res[1] = 1
  return res
end
if not busy and fits then return take() end

local total = redis.call('ZCARD', w.q)
local mine = tonumber(redis.call('HGET', w.u, user) or '0')
if maxw >= 1 and maxu >= 1 and total >= maxw and mine < maxu then
  while total >= maxw and drop_longest(w, mine, 2 * tonumber(ARGV[5])) do total = total - 1 end
end
if maxw < 1 or maxu < 1 or total >= maxw or mine >= maxu then
  -- No room to wait. After a pass (a lease may have expired since the
  -- last), a call that fits takes nothing a waiting ticket could use: none
  -- that fits is left. (Not busy, it did not fit above.)
  if busy then
    local aside = pass(w, now) or {}
    more = borrow and lends()
    fits = true
    for i, k in ipairs(lanes) do
      local c = count(k, now)
      res[i + 2] = c
      if c + (aside[k] or 0) + (seats and seats[i] or 1) > tonumber(ARGV[10 + i]) + (more and more[i] or 0) then
        fits = false
      end
    end
    if fits then return take() end
  end
  reset_if_empty(w)
  return res
end

local v = tonumber(redis.call('HGET', w.s, 'v') or '0')
local f = tonumber(redis.call('HGET', w.f, user) or '0')
-- A user who already holds k seats in its own lane (ARGV[11+n]) joins
-- k rounds on: calls taken at once, before anyone waited, count as its turns.
local ul = tonumber(ARGV[11 + n] or '0')
local held = 0
if ul >= 1 and ul <= n then held = res[ul + 2] end
local s, est = math.max(v + held, f), cost
if fb > 0 then
  s = fair_tag(w, user, mine, v, f, now)
  est = fair_estimate(w, user)
end
redis.call('HSET', w.f, user, s + est)
local seq = redis.call('HINCRBY', w.s, 'seq', 1)
local m = string.format('%016d:%s', seq, token)
local limits = {}
for i = 1, n do limits[i] = tonumber(ARGV[10 + i]) end
redis.call('ZADD', w.q, s, m)
local tk = {m = m, u = user, k = lanes, l = limits, c = tonumber(ARGV[6]), n = ARGV[10]}
if cost > 1 then tk.s, tk.ul = seats, ul end
if borrow then tk.b = borrow end
if fb > 0 then tk.fb, tk.e = fb, est end
redis.call('HSET', w.t, token, cjson.encode(tk))
redis.call('HINCRBY', w.u, user, 1)
redis.call('ZINCRBY', w.l, 1, user)
redis.call('ZADD', w.e, now + tonumber(ARGV[5]), token)
redis.call('ZADD', uq(w, user), seq, token)
-- The user's queue empties as its tickets leave; its TTL only bounds what
-- a list nobody touches again leaves behind (a pump does not renew it).
redis.call('PEXPIRE', uq(w, user), 600000)
for _, k in ipairs(lanes) do redis.call('HINCRBY', w.n, k, 1) end
note_first(w, lanes[1], limits[1] + (borrow and borrow[1][3] or 0))
touch_lazily(w, 2 * tonumber(ARGV[5]))
pass(w, now)
local st = where(w, token, lanes, now)
res[1], res[2] = st[1], st[2]
return res
