-- acquire: take a lease in every lane of a call, or in none, atomically.
--
-- KEYS:    the call's lane keys, in lane order; each a sorted set of
--          member = lease token, score = the lease's expiry in ms by
--          Redis's clock.
-- ARGV[1]: the lease token.
-- ARGV[2]: the lease in ms (> 0).
-- ARGV[3]: "1" to take the lease even when a lane is full (not enforced),
--          else "0".
-- ARGV[4]: not-after, Unix ms by the caller's clock; "0" for none. If
--          Redis runs this script later, it takes nothing.
-- ARGV[5..4+#KEYS]: the limit of each lane; 0 means paused (always full).
--
-- Returns: {-1} when run after not-after (nothing taken); otherwise
--          {taken, count_1, ..., count_n}: taken is 1 when the lease was
--          added to every lane, 0 when to none; count_i is the number of
--          unexpired leases in KEYS[i] before this call.
--
-- Expired leases (expiry <= now) are dropped from every lane first. A lane
-- is full when its count >= its limit. Each key's TTL is raised to
-- 2 x lease, never shortened; a key without a TTL gets one.
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

local res = {0}
local full = false
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  local n = redis.call('ZCARD', key)
  res[i + 1] = n
  if n >= tonumber(ARGV[4 + i]) then
    full = true
  end
end

if force or not full then
  local expiry = now + lease
  local ttl = 2 * lease
  for _, key in ipairs(KEYS) do
    redis.call('ZADD', key, expiry, token)
    local pttl = redis.call('PTTL', key)
    if pttl < ttl then -- -1 (no TTL) counts as shorter
      redis.call('PEXPIRE', key, ttl)
    end
  end
  res[1] = 1
end
return res
