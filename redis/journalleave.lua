-- journalleave: an incarnation says goodbye.
--
-- KEYS[1]: the group's roster (see journalrenew.lua).
-- KEYS[2]: the incarnation's journal (see journalread.lua).
-- ARGV[1]: the incarnation's id.
--
-- Returns: 1 when it left the roster (its journal empty), 0 when it stays
--          in it as dead (liveness 0) for another incarnation to release
--          what its journal still holds.
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 1
end
redis.call('ZADD', KEYS[1], 0, ARGV[1])
-- The roster outlives the journal it leads to.
local keep = redis.call('PTTL', KEYS[2])
if keep > 0 and redis.call('PTTL', KEYS[1]) < keep then
  redis.call('PEXPIRE', KEYS[1], keep)
end
return 0
