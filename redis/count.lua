-- count: how many unexpired leases each lane holds. Changes nothing.
--
-- KEYS:    the lane keys (sorted sets of token -> expiry in ms by Redis's
--          clock).
-- ARGV:    none.
--
-- Returns: {count_1, ..., count_n}: the members of KEYS[i] with an
--          expiry > now (0 for a missing key).
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local res = {}
for i, key in ipairs(KEYS) do
  res[i] = redis.call('ZCARD', key) - redis.call('ZCOUNT', key, '-inf', now)
end
return res
