-- seats: the seats of a call in a lane, prepended to every script that
-- adds, renews or removes them (Redis has no includes). It defines
-- functions only: no KEYS, ARGV or command of its own.
--
-- A call of k seats in a lane (a sorted set of member -> expiry in ms by
-- Redis's clock) is k members with the same expiry: the token, token#2,
-- ..., token#k. Seats 2..k exist only with seat 1 and go in order, so
-- the first missing one ends them.

-- seat is the member of a call's seat j (1: the token itself).
local function seat(token, j)
  if j == 1 then return token end
  return token .. '#' .. j
end

-- add_seats adds a call's seats 2..seats (token#2, ...) to key with
-- expiry, by ZADDs of up to 100 members (200 arguments).
local function add_seats(key, token, expiry, seats)
  local args, n = {}, 0
  for j = 2, seats do
    args[n + 1] = expiry
    args[n + 2] = seat(token, j)
    n = n + 2
    if n == 200 or j == seats then
      redis.call('ZADD', key, unpack(args, 1, n))
      n = 0
    end
  end
end

-- renew_seats sets a call's seats 2, 3, ... in key (up to the first
-- missing one) to expiry, those whose expiry is still > now: an expired
-- seat is never revived (ZADD XX: none is added).
local function renew_seats(key, token, expiry, now)
  local j = 2
  while true do
    local m = seat(token, j)
    local score = redis.call('ZSCORE', key, m)
    if not score then break end
    if tonumber(score) > now then redis.call('ZADD', key, 'XX', expiry, m) end
    j = j + 1
  end
end

-- drop_seats removes a call's seats from key, from seat j on (one ZREM
-- each), up to the first missing one; it returns how many it removed.
local function drop_seats(key, token, j)
  local removed = 0
  while redis.call('ZREM', key, seat(token, j)) == 1 do
    removed = removed + 1
    j = j + 1
  end
  return removed
end
