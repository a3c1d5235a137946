-- repeatbytes: reserve room for one kept answer within the bound of all
-- kept answers and the bound of its user's, by Redis's clock.
--
-- KEYS[1]: a sorted set of the answers counted: member
--          "<bytes>:<user>:<token>", score when the answer expires (ms).
-- KEYS[2]: the total of the unexpired members' bytes (a string).
-- KEYS[3]: a hash of each user's unexpired members' bytes.
-- ARGV[1]: the answer's bytes.
-- ARGV[2]: how long it is kept, in ms (> 0).
-- ARGV[3]: the bound of all kept answers' bytes.
-- ARGV[4]: the call's token.
-- ARGV[5]: the user's tag ([0-9a-f]*; "" counts as a user too).
-- ARGV[6]: the bound of one user's kept answers' bytes.
--
-- Returns: 1 when reserved (counted until the answer expires); 0 when it
--          would pass either bound. At most 1000 expired members are
--          dropped per run, so a run is short; the rest go on later runs.
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 1000)
local freed = 0
for _, m in ipairs(gone) do
  local bytes, user = string.match(m, '^(%d+):([0-9a-f]*):')
  if not bytes then
    bytes = string.match(m, '^(%d+):') -- counted before users were
  elseif redis.call('HINCRBY', KEYS[3], 'u' .. user, -tonumber(bytes)) <= 0 then
    redis.call('HDEL', KEYS[3], 'u' .. user)
  end
  freed = freed + tonumber(bytes)
  redis.call('ZREM', KEYS[1], m)
end
local total = tonumber(redis.call('GET', KEYS[2]) or '0') - freed
if total < 0 or redis.call('ZCARD', KEYS[1]) == 0 then
  total = 0
  redis.call('DEL', KEYS[3])
end

-- The keys live until the last answer counted expires.
local function settle(sum)
  redis.call('SET', KEYS[2], sum)
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIREAT', KEYS[1], last[2])
    redis.call('PEXPIREAT', KEYS[2], last[2])
    if redis.call('EXISTS', KEYS[3]) == 1 then
      redis.call('PEXPIREAT', KEYS[3], last[2])
    end
  else
    redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
  end
end

local size = tonumber(ARGV[1])
local mine = tonumber(redis.call('HGET', KEYS[3], 'u' .. ARGV[5]) or '0')
if total + size > tonumber(ARGV[3]) or mine + size > tonumber(ARGV[6]) then
  settle(total)
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1] .. ':' .. ARGV[5] .. ':' .. ARGV[4])
redis.call('HINCRBY', KEYS[3], 'u' .. ARGV[5], size)
settle(total + size)
return 1
