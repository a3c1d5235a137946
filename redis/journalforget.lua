-- journalforget: forget a dead incarnation's released records, and the
-- incarnation once its journal is empty.
--
-- KEYS[1]: the group's roster (see journalrenew.lua).
-- KEYS[2]: the incarnation's journal (see journalread.lua).
-- ARGV[1]: the incarnation's id.
-- ARGV[2..]: the tokens to forget.
--
-- Returns: 1 when the incarnation left the roster (its journal empty, its
--          liveness lapsed), else 0.
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- In chunks: unpack's stack is bounded.
for i = 2, #ARGV, 1000 do
  redis.call('HDEL', KEYS[2], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
local until_ = redis.call('ZSCORE', KEYS[1], ARGV[1])
if until_ and tonumber(until_) <= now then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 1
end
return 0
