-- repeatbytes: reserve room for one kept answer within the bound of all
-- kept answers, by Redis's clock.
--
-- KEYS[1]: a sorted set of the answers counted: member "<bytes>:<token>",
--          score when the answer expires (ms).
-- KEYS[2]: the total of the unexpired members' bytes (a string).
-- ARGV[1]: the answer's bytes.
-- ARGV[2]: how long it is kept, in ms (> 0).
-- ARGV[3]: the bound of all kept answers' bytes.
-- ARGV[4]: the call's token.
--
-- Returns: 1 when reserved (counted until the answer expires); 0 when it
--          would pass the bound. At most 1000 expired members are dropped
--          per run, so a run is short; the rest go on later runs.
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 1000)
local freed = 0
for _, m in ipairs(gone) do
  freed = freed + tonumber(string.match(m, '^(%d+):'))
  redis.call('ZREM', KEYS[1], m)
end
local total = tonumber(redis.call('GET', KEYS[2]) or '0') - freed
if total < 0 or redis.call('ZCARD', KEYS[1]) == 0 then total = 0 end

-- Both keys live until the last answer counted expires.
local function settle(sum)
  redis.call('SET', KEYS[2], sum)
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIREAT', KEYS[1], last[2])
    redis.call('PEXPIREAT', KEYS[2], last[2])
  else
    redis.call('DEL', KEYS[1], KEYS[2])
  end
end

local size = tonumber(ARGV[1])
if total + size > tonumber(ARGV[3]) then
  settle(total)
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1] .. ':' .. ARGV[4])
settle(total + size)
return 1
