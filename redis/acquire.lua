-- acquire: take a call's seats in every lane, or in none, atomically.
--
-- KEYS:    the call's n lane keys, in lane order; each a sorted set of
--          member = lease token, score = the lease's expiry in ms by
--          Redis's clock. A call of k seats in a lane is k members with
--          the same expiry: the token, token#2, ..., token#k. Then, only
--          when some lane lends (Borrow), the class key of each lane that
--          lends, in lane order: read (its expired members dropped), never
--          written to.
-- ARGV[1]: the lease token.
-- ARGV[2]: the lease in ms (> 0).
-- ARGV[3]: "1" to take the lease even when a lane is full (not enforced),
--          else "0".
-- ARGV[4]: not-after, Unix ms by the caller's clock; "0" for none. If
--          Redis runs this script later, it takes nothing.
-- ARGV[5..4+n]: the limit of each lane; 0 means paused (always full).
-- ARGV[5+n..4+2*n]: the seats the call takes in each lane (each >= 1);
--          absent: 1 in each lane.
-- Only when some lane lends (Borrow); then the seats above are sent even
-- when all are 1:
-- ARGV[5+2*n..4+3*n]: each lane's reserve, 0 where it lends nothing;
-- ARGV[5+3*n..4+4*n]: each lane's lend, 0 where it lends nothing;
-- ARGV[5+4*n]: n.
-- n is #KEYS without Borrow (ARGV then holds 4 + n or 4 + 2*n values),
-- ARGV's last value with it (5 + 4*n values, more than 4 + 2*#KEYS since
-- #KEYS <= 2*n): so a call without Borrow sends what it did before lending.
--
-- Returns: {-1} when run after not-after (nothing taken); otherwise
--          {taken, count_1, ..., count_n, class_1, ..., class_m}: taken is
--          1 when the seats were added to every lane, 0 when to none;
--          count_i is the number of unexpired members (seats) in KEYS[i]
--          before this call, class_j that of the j-th class key
--          (KEYS[n+j]; none without Borrow).
--
-- Expired leases (expiry <= now) are dropped from every lane (and class
-- key) first. A lane's limit for the call is its limit + what it lends:
-- min(lend, max(reserve - its class key's count, 0)). A lane is full when
-- its count + the call's seats there > that limit. Each lane's TTL is
-- raised to 2 x lease, never shortened; a key without a TTL gets one.
--
-- seats.lua heads it (add_seats).
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local notafter = tonumber(ARGV[4])
if notafter > 0 and now > notafter then
  return {-1}
end

local token = ARGV[1]
local lease = tonumber(ARGV[2])
local force = ARGV[3] == '1'

-- n: the lanes; lends: false when no lane lends (ARGV has no Borrow).
local n, lends = #KEYS, #ARGV > 4 + 2 * #KEYS
if lends then n = tonumber(ARGV[#ARGV]) end

-- seats: nil when ARGV has none (1 in each lane).
local seats = nil
if ARGV[5 + n] then
  seats = {}
  for i = 1, n do seats[i] = tonumber(ARGV[4 + n + i]) end
end

local res = {0}
local full = false
local j = n -- the last class key read
for i = 1, n do
  local key = KEYS[i]
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  local c = redis.call('ZCARD', key)
  res[i + 1] = c
  local limit = tonumber(ARGV[4 + i])
  if lends then
    local reserve = tonumber(ARGV[4 + 2 * n + i])
    if reserve > 0 then
      j = j + 1
      redis.call('ZREMRANGEBYSCORE', KEYS[j], '-inf', now)
      local class = redis.call('ZCARD', KEYS[j])
      res[j + 1] = class
      limit = limit + math.min(tonumber(ARGV[4 + 3 * n + i]), math.max(reserve - class, 0))
    end
  end
  if c + (seats and seats[i] or 1) > limit then
    full = true
  end
end

if force or not full then
  local expiry = now + lease
  local ttl = 2 * lease
  for i = 1, n do
    local key = KEYS[i]
    redis.call('ZADD', key, expiry, token)
    if seats and seats[i] > 1 then add_seats(key, token, expiry, seats[i]) end
    local pttl = redis.call('PTTL', key)
    if pttl < ttl then -- -1 (no TTL) counts as shorter
      redis.call('PEXPIRE', key, ttl)
    end
  end
  res[1] = 1
end
return res
