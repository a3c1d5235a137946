-- waitjoin: join the waitlist, or take the leases at once when nobody waits
-- on the call's lanes (exactly as acquire.lua without force).
--
-- KEYS:    the call's lane keys, in lane order.
-- ARGV[1]: the key prefix P (the waitlist's keys are P:wait:*).
-- ARGV[2]: the lease token.
-- ARGV[3]: the call's lease in ms, when taken at once.
-- ARGV[4]: not-after, Unix ms by the caller's clock; "0" for none.
-- ARGV[5]: the ticket's lease in ms.
-- ARGV[6]: a grant's claim time in ms.
-- ARGV[7]: max tickets waiting under P; ARGV[8]: max per user.
-- ARGV[9]: the user id. ARGV[10]: the channel to PUBLISH the token to
--          when the ticket is granted.
-- ARGV[11..10+#KEYS]: the limit of each lane for this call (none is 0).
--
-- Returns: {-1} when run after not-after (nothing done); otherwise
--          {state, next_ms, count_1, ..., count_n}: state 1 = holds the
--          leases (at once, or granted by the pass this join ran), 2 =
--          queued, 0 = neither (no room to wait). A full list makes room
--          by dropping the newest ticket of the user holding the most
--          (drop_longest) when that user holds more than this one + 1; next_ms as in waitpass's
--          where; count_i = the unexpired leases in KEYS[i] before.
local now = now_ms()
local notafter = tonumber(ARGV[4])
if notafter > 0 and now > notafter then return {-1} end

local w = wkeys(ARGV[1])
local token, lease = ARGV[2], tonumber(ARGV[3])
local maxw, maxu, user = tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9]

local busy = false
if redis.call('EXISTS', w.q) == 1 then
  drop_expired(w, now)
  for _, k in ipairs(KEYS) do
    if tonumber(redis.call('HGET', w.n, k) or '0') > 0 then busy = true end
  end
end

local res = {0, 0}
local fits = true
for i, k in ipairs(KEYS) do
  local n = count(k, now)
  res[i + 2] = n
  if n >= tonumber(ARGV[10 + i]) then fits = false end
end
local function take()
  for _, k in ipairs(KEYS) do add(k, token, now, lease) end
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
    pass(w, now)
    fits = true
    for i, k in ipairs(KEYS) do
      local n = count(k, now)
      res[i + 2] = n
      if n >= tonumber(ARGV[10 + i]) then fits = false end
    end
    if fits then return take() end
  end
  reset_if_empty(w)
  return res
end

local v = tonumber(redis.call('HGET', w.s, 'v') or '0')
local f = tonumber(redis.call('HGET', w.f, user) or '0')
-- A user who already holds k slots in its own lane (the last key) joins k
-- rounds on: calls taken at once, before anyone waited, count as its turns.
local s = math.max(v + res[#KEYS + 2], f)
redis.call('HSET', w.f, user, s + 1)
local seq = redis.call('HINCRBY', w.s, 'seq', 1)
local m = string.format('%016d:%s', seq, token)
local limits = {}
for i = 1, #KEYS do limits[i] = tonumber(ARGV[10 + i]) end
redis.call('ZADD', w.q, s, m)
redis.call('HSET', w.t, token, cjson.encode({m = m, u = user, k = KEYS, l = limits,
  c = tonumber(ARGV[6]), n = ARGV[10]}))
redis.call('HINCRBY', w.u, user, 1)
redis.call('ZINCRBY', w.l, 1, user)
redis.call('ZADD', w.e, now + tonumber(ARGV[5]), token)
redis.call('ZADD', uq(w, user), seq, token)
-- The user's queue empties as its tickets leave; its TTL only bounds what
-- a list nobody touches again leaves behind (a pump does not renew it).
redis.call('PEXPIRE', uq(w, user), 600000)
for _, k in ipairs(KEYS) do redis.call('HINCRBY', w.n, k, 1) end
note_first(w, KEYS[1], limits[1])
touch_lazily(w, 2 * tonumber(ARGV[5]))
pass(w, now)
local st = where(w, token, KEYS, now)
res[1], res[2] = st[1], st[2]
return res
