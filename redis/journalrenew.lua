-- journalrenew: renew an incarnation's liveness in its group's roster, and
-- read the others'.
--
-- KEYS[1]: the group's roster (a sorted set: incarnation id -> the ms, by
--          Redis's clock, at which its liveness lapses; 0 once it said
--          goodbye).
-- ARGV[1]: the incarnation's id.
-- ARGV[2]: its liveness in ms (> 0).
-- ARGV[3]: the least the roster is kept, in ms (> 0): it is never
--          shortened.
--
-- Returns: a flat list, for every other incarnation of the roster, of its
--          id and the ms of liveness it has left (<= 0: lapsed).
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end

local all = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local out = {}
for i = 1, #all, 2 do
  if all[i] ~= ARGV[1] then
    out[#out + 1] = all[i]
    out[#out + 1] = string.format('%d', tonumber(all[i + 1]) - now)
  end
end
return out
