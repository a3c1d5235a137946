-- journalread: read a dead incarnation's journal.
--
-- KEYS[1]: the group's roster (see journalrenew.lua).
-- KEYS[2]: the incarnation's journal (a hash: token -> the JSON list of
--          the lane keys it holds leases in).
-- ARGV[1]: the incarnation's id.
--
-- Returns: {0} while the incarnation's liveness has not lapsed (nothing
--          is read); else {1, token, keys, token, keys, ...}, its whole
--          journal (left as it is).
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local until_ = redis.call('ZSCORE', KEYS[1], ARGV[1])
if until_ and tonumber(until_) > now then
  return {0}
end
local out = redis.call('HGETALL', KEYS[2])
table.insert(out, 1, 1)
return out
