-- tune: add a gateway's samples to an adaptive lane's window and, when the
-- step is due, take the window (one gateway of the cluster gets it).
--
-- KEYS:    [1] the lane's tune hash: state (opaque), at (ms of the last
--          window taken, by Redis's clock), n, sum, full, maxin, sumin
--          (the window being gathered).
-- ARGV:    [1] n, [2] sum (µs), [3] full, [4] maxin, [5] sumin: the samples
--          to add; [6] every (ms): how often a window is taken; [7] the
--          hash's TTL (ms), raised on every call.
--
-- Returns: {state or false, due (0|1), n, sum, full, maxin, sumin}: the
--          window's sums are those taken when due, else 0.
if redis.replicate_commands then redis.replicate_commands() end

local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local n = tonumber(ARGV[1])
if n > 0 then
  redis.call('HINCRBY', key, 'n', n)
  redis.call('HINCRBY', key, 'sum', ARGV[2])
  redis.call('HINCRBY', key, 'full', ARGV[3])
  redis.call('HINCRBY', key, 'sumin', ARGV[5])
  local maxin = tonumber(redis.call('HGET', key, 'maxin') or '0')
  if tonumber(ARGV[4]) > maxin then
    redis.call('HSET', key, 'maxin', ARGV[4])
  end
end

local state = redis.call('HGET', key, 'state')
local at = redis.call('HGET', key, 'at')
local res = {state, 0, 0, 0, 0, 0, 0}
if not at or now - tonumber(at) >= tonumber(ARGV[6]) then
  local w = redis.call('HMGET', key, 'n', 'sum', 'full', 'maxin', 'sumin')
  res[2] = 1
  for i = 1, 5 do res[2 + i] = tonumber(w[i] or '0') end
  redis.call('HDEL', key, 'n', 'sum', 'full', 'maxin', 'sumin')
  redis.call('HSET', key, 'at', now)
end
redis.call('PEXPIRE', key, ARGV[7])
return res
