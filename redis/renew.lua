-- renew: extend every lease of a call, or none, atomically.
--
-- KEYS:    the call's lane keys (sorted sets of token -> expiry in ms by
--          Redis's clock; a call of k seats holds token, token#2, ...,
--          token#k).
-- ARGV[1]: the lease token.
-- ARGV[2]: the lease in ms (> 0).
--
-- Returns: the number of KEYS that hold the token with an expiry > now.
--          Only when that is #KEYS is every seat of the call (the token,
--          then token#2, token#3, ... up to the first missing one) set to
--          now + lease and each key's TTL raised to 2 x lease (never
--          shortened); otherwise nothing changes. An expired lease or seat
--          is never revived, a missing one never added, and a deleted key
--          never re-created (ZADD XX on keys known to hold the token).
--
-- seats.lua heads it (renew_seats).
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local token = ARGV[1]
local lease = tonumber(ARGV[2])

local held = 0
for _, key in ipairs(KEYS) do
  local score = redis.call('ZSCORE', key, token)
  if score and tonumber(score) > now then
    held = held + 1
  end
end

if held == #KEYS then
  local expiry = now + lease
  local ttl = 2 * lease
  for _, key in ipairs(KEYS) do
    redis.call('ZADD', key, 'XX', expiry, token)
    renew_seats(key, token, expiry, now)
    local pttl = redis.call('PTTL', key)
    if pttl < ttl then -- -1 (no TTL) counts as shorter
      redis.call('PEXPIRE', key, ttl)
    end
  end
end
return held
