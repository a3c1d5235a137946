-- release: take a call's seats out of its lanes. Release runs it as its
-- second step, from seat 3, on the keys where its pipelined ZREMs took
-- both the token and token#2 (the call held 2 seats or more there).
--
-- KEYS:    lane keys (sorted sets of token -> expiry; a call of k seats
--          holds token, token#2, ..., token#k).
-- ARGV[1]: the lease token.
-- ARGV[2]: the first seat to take, j >= 1 (1 is the token itself, j >= 2
--          token#j); absent: 1.
--
-- Returns: the number of members removed, in all KEYS: from seat j on, up
--          to the first one missing in each key.
--
-- seats.lua heads it (drop_seats).
local token = ARGV[1]
local from = tonumber(ARGV[2] or '1')
local removed = 0
for _, key in ipairs(KEYS) do
  removed = removed + drop_seats(key, token, from)
end
return removed
