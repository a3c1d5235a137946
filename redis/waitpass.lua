-- waitpass: the waitlist's shared part, prepended to every wait*.lua
-- script (Redis has no includes), after seats.lua (add_seats, drop_seats).
-- It defines no KEYS or ARGV of its own (borrow_args reads the Borrow its
-- caller's header lays out).
--
-- Keys outside the running script's KEYS: the waitlist's own (below, under
-- its ARGV prefix), and the lanes and class keys of the other tickets the
-- pass judges (it counts and grants in their lanes, counts their class
-- keys). Each ticket's keys shared the prefix's hash tag at its join
-- (redis.Store checks every operation's keys and prefix for one hash tag),
-- so on a Redis Cluster all of them are in the script's slot.
--
-- The waitlist under prefix P lives in these keys, all under P so that a
-- hash-tagged prefix keeps them in one slot with the lanes:
--   P:wait:q  sorted set of waiting tickets: score = start tag S, member =
--             <16-digit arrival seq>:<token>, so ties go by arrival;
--   P:wait:t  hash token → the ticket as JSON {m = its member, u = user,
--             k = lane keys, l = limits, c = claim ms, n = the channel to
--             PUBLISH its token to when granted; and, only for a ticket of
--             more than one seat in some lane, s = its seats per lane and
--             ul = 1 + the index of its user's own lane in k, 0 none; and,
--             only for a ticket that borrows (some lane lends it), b = per
--             lane {class key, reserve, lend}, {'', 0, 0} where the lane
--             lends nothing};
--   P:wait:n  hash lane key → tickets waiting on it;
--   P:wait:u  hash user → tickets waiting;
--   P:wait:f  hash user → finish tag F of the user's newest ticket;
--   P:wait:s  hash: v = virtual time V, seq = arrivals so far, k1 and l1
--             (see note_first);
--   P:wait:e  sorted set token → the ticket's expiry ms, the one place it
--             is kept: expired tickets are found in O(log n), never by
--             reading every ticket, and a pump renews a ticket's expiry
--             without reading it (a pump with new limits reads it, and
--             rewrites it when they differ: set_limits);
--   P:wait:l  sorted set user → tickets waiting: the user holding the most
--             in O(log n) (the longest-queue drop, in waitjoin);
--   P:wait:uq:<user>  sorted set token → arrival seq of the user's tickets
--             (its newest, for the drop);
--   P:wait:x:<token>  set (with a TTL) when the ticket was dropped to make
--             room: its waiter is refused, not treated as lost.
-- Fair work (capgate.Waitlist: a ticket of fairness by time or usage has
-- fb = 1 or 2 and e = the estimate its join charged in its JSON):
--   P:wait:r  hash token → a running call's record as JSON {u = user, s =
--             seats, t = start ms, e = estimate, b = 1 when charged by
--             time while it runs, q = 1 when granted from the list, k =
--             the call's first lane key, which holds its lease as the
--             token: the record ends with that lease (fair_leased)};
--   P:wait:ru:<user>  sorted set token → start ms of the user's running
--             calls (their provisional charge at the user's next join);
--   P:wait:rq sorted set token → start ms of the running calls granted
--             from the list: while one runs, the tags outlive the queue;
--   P:wait:c  hash user → the cost of its last call charged ('' → anyone's):
--             the estimate of its next ticket.
--   Each lives RUN_MAX_MS from its last write; a record older is dropped,
--   and so is one whose call's lease has gone (expired, unrenewed: its
--   gateway died), found when its user joins (fair_pending) or the list
--   empties (fair_keeps). The lane key k shares the prefix's hash tag (its
--   ticket's join checked it), so reading it stays in the script's slot.
-- When the queue empties, the first eight are deleted: the fair tags start
-- over (but P:wait:f and v stay while a call granted from it runs, and
-- waitrelease deletes them once none does).
-- Each join and pump raises their TTL to 2 x the ticket lease, so tickets
-- nobody pumps (their gateways died) don't outlive them for long even if
-- no call comes by to drop them.
if redis.replicate_commands then redis.replicate_commands() end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function wkeys(prefix)
  local b = prefix .. ':wait:'
  return {q = b .. 'q', t = b .. 't', n = b .. 'n', u = b .. 'u', f = b .. 'f', s = b .. 's',
    e = b .. 'e', l = b .. 'l', b = b}
end

-- uq is the key of user's own queue; xk the dropped mark of token.
local function uq(w, user) return w.b .. 'uq:' .. user end
local function xk(w, token) return w.b .. 'x:' .. token end

-- RUN_MAX_MS is capgate.RunMaxAge: a running call's record lives no
-- longer, even while its lease is renewed.
local RUN_MAX_MS = 600000

-- fair_start records a call of a fair-work ticket (fb 1: time, 2: usage)
-- as running from now, with the estimate its join charged (0: taken at
-- once), whether it was granted from the list, and key, its first lane.
local function fair_start(w, token, user, seats, est, fb, queued, now, key)
  if not fb or fb == 0 then return end
  local rec = {u = user, s = seats, t = now, e = est, b = (fb == 1) and 1 or 0, q = queued and 1 or 0, k = key}
  redis.call('HSET', w.b .. 'r', token, cjson.encode(rec))
  redis.call('PEXPIRE', w.b .. 'r', RUN_MAX_MS)
  local ru = w.b .. 'ru:' .. user
  redis.call('ZADD', ru, now, token)
  redis.call('PEXPIRE', ru, RUN_MAX_MS)
  if queued then
    redis.call('ZADD', w.b .. 'rq', now, token)
    redis.call('PEXPIRE', w.b .. 'rq', RUN_MAX_MS)
  end
end

-- fair_leased reports whether the call of record r (token tok) still
-- holds its lease: tok in its lane r.k with an expiry after now (as
-- holds). A record without k counts as leased (RUN_MAX_MS bounds it).
local function fair_leased(r, tok, now)
  if not r.k then return true end
  local e = redis.call('ZSCORE', r.k, tok)
  return e ~= false and e ~= nil and tonumber(e) > now
end

-- fair_drop ends the record of tok, a call of user whose lease has gone,
-- without a charge: the estimate its join charged stands as its cost
-- (when its lease ended is not known once its lane has pruned it, and
-- charging it up to now would charge it past its lease).
local function fair_drop(w, tok, user)
  redis.call('HDEL', w.b .. 'r', tok)
  redis.call('ZREM', w.b .. 'ru:' .. user, tok)
  redis.call('ZREM', w.b .. 'rq', tok)
end

-- fair_keeps reports whether a call granted from the list runs (started
-- less than RUN_MAX_MS ago, and holds its lease), dropping the records of
-- those that don't.
local function fair_keeps(w, now)
  local rq = w.b .. 'rq'
  redis.call('ZREMRANGEBYSCORE', rq, '-inf', now - RUN_MAX_MS - 1)
  for _, tok in ipairs(redis.call('ZRANGE', rq, 0, -1)) do
    local raw = redis.call('HGET', w.b .. 'r', tok)
    if not raw then
      redis.call('ZREM', rq, tok)
    else
      local r = cjson.decode(raw)
      if not fair_leased(r, tok, now) then fair_drop(w, tok, r.u) end
    end
  end
  return redis.call('ZCARD', rq) > 0
end

-- fair_estimate is a new ticket's estimate: the cost of the user's last
-- call charged, or anyone's, or 1.
local function fair_estimate(w, user)
  local c = redis.call('HMGET', w.b .. 'c', user, '')
  local e = tonumber(c[1] or c[2] or '1') or 1
  if e < 1 then e = 1 end
  return e
end

-- fair_pending is the provisional charge of user's calls running now
-- (for those charged by time, seats x ms held beyond their estimate), and
-- how many run: a call whose lease has gone runs no more (fair_drop).
local function fair_pending(w, user, now)
  local ru = w.b .. 'ru:' .. user
  local old = redis.call('ZRANGEBYSCORE', ru, '-inf', now - RUN_MAX_MS - 1)
  for _, tok in ipairs(old) do
    redis.call('HDEL', w.b .. 'r', tok)
    redis.call('ZREM', w.b .. 'rq', tok)
  end
  if #old > 0 then redis.call('ZREMRANGEBYSCORE', ru, '-inf', now - RUN_MAX_MS - 1) end
  local p, running = 0, 0
  for _, tok in ipairs(redis.call('ZRANGE', ru, 0, -1)) do
    local raw = redis.call('HGET', w.b .. 'r', tok)
    local r = raw and cjson.decode(raw)
    if r and fair_leased(r, tok, now) then
      running = running + 1
      if r.b == 1 then p = p + math.max(r.s * (now - r.t) - r.e, 0) end
    elseif r then
      fair_drop(w, tok, user)
    else
      redis.call('ZREM', ru, tok)
    end
  end
  return p, running
end

-- fair_tag is the start tag of a new fair-work ticket of user, who has
-- mine tickets waiting, with the list's v and the user's counter f: the
-- counter with its provisional charge, lifted to v only when the user is
-- newly active (nothing of it waits or runs), so a user whose calls run
-- or wait keeps its counter's credit however v leapt meanwhile.
local function fair_tag(w, user, mine, v, f, now)
  local p, running = fair_pending(w, user, now)
  if running > 0 or mine > 0 then return f + p end
  return math.max(v, f + p)
end

-- fair_lift lifts user's counter to v when a call it takes at once makes
-- it newly active (fair_tag).
local function fair_lift(w, user, fb, now)
  if not fb or fb == 0 or redis.call('EXISTS', w.f) == 0 then return end
  if tonumber(redis.call('HGET', w.u, user) or '0') > 0 then return end
  local _, running = fair_pending(w, user, now)
  if running > 0 then return end
  local v = tonumber(redis.call('HGET', w.s, 'v') or '0')
  local f = tonumber(redis.call('HGET', w.f, user) or '0')
  if f < v then redis.call('HSET', w.f, user, v) end
end

-- borrow_args reads the Borrow a script's ARGV sends for n lanes (see
-- acquire.lua): the reserves at ARGV[at..at+n-1], the lends after them,
-- the class keys of the lanes that lend (reserve > 0) at KEYS[n+1..] in
-- lane order. It returns per lane {class key, reserve, lend}, {'', 0, 0}
-- where the lane lends nothing.
local function borrow_args(at, n)
  local b, j = {}, n
  for i = 1, n do
    local r = tonumber(ARGV[at + i - 1])
    if r > 0 then
      j = j + 1
      b[i] = {KEYS[j], r, tonumber(ARGV[at + n + i - 1])}
    else
      b[i] = {'', 0, 0}
    end
  end
  return b
end

-- lent returns the seats a lane lends a ticket (or a call Join judges):
-- e is the lane's {class key, reserve, lend} ('': it lends nothing) and c
-- the class's seats there (its key's count): min(lend, max(reserve - c,
-- 0)), but 0 while any ticket waits on the class key (a call of the class
-- waits: the seats go to it first).
local function lent(w, e, c)
  if e[1] == '' or tonumber(redis.call('HGET', w.n, e[1]) or '0') > 0 then return 0 end
  return math.min(e[3], math.max(e[2] - c, 0))
end

-- count prunes a lane's expired leases and returns how many are left.
local function count(key, now)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  return redis.call('ZCARD', key)
end

-- add puts a call's seats in key, token and token#2..token#seats (seats
-- nil: 1), with expiry now+ms, raising the TTL to 2 x ms.
local function add(key, token, now, ms, seats)
  redis.call('ZADD', key, now + ms, token)
  if seats and seats > 1 then add_seats(key, token, now + ms, seats) end
  if redis.call('PTTL', key) < 2 * ms then -- -1 (no TTL) counts as shorter
    redis.call('PEXPIRE', key, 2 * ms)
  end
end

-- remove_ticket takes a ticket off the list. A user left with no ticket
-- by one that was not granted (it left or expired) loses its finish tag:
-- its next ticket joins the current round instead of queueing behind the
-- rounds its abandoned tickets had reserved.
local function remove_ticket(w, token, tk, granted)
  redis.call('ZREM', w.q, tk.m)
  redis.call('HDEL', w.t, token)
  redis.call('ZREM', w.e, token)
  redis.call('ZREM', uq(w, tk.u), token)
  if tonumber(redis.call('ZINCRBY', w.l, -1, tk.u)) <= 0 then redis.call('ZREM', w.l, tk.u) end
  if not granted and tk.fb then redis.call('HINCRBY', w.f, tk.u, -tk.e) end -- gives back its estimate
  if redis.call('HINCRBY', w.u, tk.u, -1) <= 0 then
    redis.call('HDEL', w.u, tk.u)
    if not granted and not tk.fb then redis.call('HDEL', w.f, tk.u) end -- (fair work keeps it: fair_tag)
  end
  for _, k in ipairs(tk.k) do
    if redis.call('HINCRBY', w.n, k, -1) <= 0 then redis.call('HDEL', w.n, k) end
  end
end

-- touch raises the waitlist keys' TTL to ms, never shortening it.
local function touch(w, ms)
  for _, k in ipairs({w.q, w.t, w.n, w.u, w.f, w.s, w.e, w.l}) do
    local pttl = redis.call('PTTL', k)
    if pttl ~= -2 and pttl < ms then redis.call('PEXPIRE', k, ms) end
  end
end

-- touch_lazily is touch when the queue's TTL has fallen below 3/4 of ms:
-- one PTTL on most calls instead of one per key.
local function touch_lazily(w, ms)
  if redis.call('PTTL', w.q) < ms * 3 / 4 then touch(w, ms) end
end

local function reset_if_empty(w)
  if redis.call('ZCARD', w.q) == 0 then
    if fair_keeps(w, now_ms()) then
      redis.call('DEL', w.q, w.t, w.n, w.u, w.e, w.l)
      redis.call('HDEL', w.s, 'k1', 'l1')
    else
      redis.call('DEL', w.q, w.t, w.n, w.u, w.f, w.s, w.e, w.l)
    end
  end
end

-- fair_charge ends token's run and charges user cost (cost < 0 or user
-- '': nothing): the user's finish tag moves by the cost less the estimate
-- its ticket charged while the tags last (tickets wait, or a call granted
-- from the list runs); the estimates learn it in any case.
local function fair_charge(w, token, user, cost, now)
  local raw = redis.call('HGET', w.b .. 'r', token)
  local r = raw and cjson.decode(raw)
  if r then
    redis.call('HDEL', w.b .. 'r', token)
    redis.call('ZREM', w.b .. 'ru:' .. r.u, token)
    redis.call('ZREM', w.b .. 'rq', token)
  end
  if user == '' or cost < 0 then return end
  redis.call('HSET', w.b .. 'c', user, cost, '', cost)
  redis.call('PEXPIRE', w.b .. 'c', RUN_MAX_MS)
  -- Only a call recorded as running (of fair work) moves the counter.
  if r and r.u == user and (redis.call('EXISTS', w.f) == 1 or redis.call('EXISTS', w.q) == 1) then
    redis.call('HINCRBY', w.f, user, cost - r.e)
    if redis.call('PTTL', w.f) < 0 then redis.call('PEXPIRE', w.f, RUN_MAX_MS) end
  end
end

-- note_first records a ticket's first lane and its limit there (at its
-- join, and when a pump raises it), with all that lane may lend it (its
-- lend): s.k1 is the first lane of every ticket ('' once two tickets
-- differ) and s.l1 the largest such limit on it. Neither shrinks as
-- tickets leave or limits fall (the early stop stays safe, only less
-- early) until the list empties.
local function note_first(w, key, limit)
  local st = redis.call('HMGET', w.s, 'k1', 'l1')
  if st[1] == false or st[1] == nil then
    redis.call('HSET', w.s, 'k1', key, 'l1', limit)
    return
  end
  if st[1] ~= key then redis.call('HSET', w.s, 'k1', '') end
  if limit > tonumber(st[2] or '0') then redis.call('HSET', w.s, 'l1', limit) end
end

-- set_limits makes limits (one per lane, as the waiter's pump sends them:
-- the limits in force) the queued ticket's own, so every pass judges it by
-- them. The ticket is rewritten only when they changed; a raised first
-- limit raises s.l1, or the early stop would hold the ticket back.
local function set_limits(w, token, limits)
  local raw = redis.call('HGET', w.t, token)
  if not raw then return end
  local tk = cjson.decode(raw)
  local same = #tk.l == #limits
  for j = 1, #tk.l do
    if tk.l[j] ~= limits[j] then same = false end
  end
  if same then return end
  tk.l = limits
  redis.call('HSET', w.t, token, cjson.encode(tk))
  note_first(w, tk.k[1], limits[1] + (tk.b and tk.b[1][3] or 0))
end

-- drop_expired removes the tickets whose expiry has passed, found by
-- their index (P:wait:e): O(log n) plus the tickets dropped.
local function drop_expired(w, now)
  local gone = redis.call('ZRANGEBYSCORE', w.e, '-inf', now)
  for _, token in ipairs(gone) do
    local raw = redis.call('HGET', w.t, token)
    if raw then
      remove_ticket(w, token, cjson.decode(raw), false)
    else
      redis.call('ZREM', w.e, token)
    end
  end
end

-- drop_longest makes room on a full list for a user holding mine tickets:
-- when another user holds more than mine + 1, that user's newest ticket
-- is dropped (its waiter is woken and refused: P:wait:x). The user's
-- finish tag goes back to the dropped ticket's start tag. Returns whether
-- a ticket was dropped.
local function drop_longest(w, mine, ms)
  local top = redis.call('ZREVRANGE', w.l, 0, 0, 'WITHSCORES')
  if #top < 2 or tonumber(top[2]) <= mine + 1 then return false end
  local victim = redis.call('ZREVRANGE', uq(w, top[1]), 0, 0)[1]
  if not victim then return false end
  local raw = redis.call('HGET', w.t, victim)
  if not raw then
    redis.call('ZREM', uq(w, top[1]), victim)
    return false
  end
  local tk = cjson.decode(raw)
  local s = redis.call('ZSCORE', w.q, tk.m)
  remove_ticket(w, victim, tk, false)
  if s then redis.call('HSET', w.f, tk.u, s) end
  redis.call('SET', xk(w, victim), '1', 'PX', ms)
  redis.call('PUBLISH', tk.n, victim)
  return true
end

-- pass is the grant pass: walk the tickets in fair order, counting each
-- lane as it goes, and grant every ticket all of whose lanes have room for
-- its seats. A ticket's limit in a lane that lends it (tk.b) is its own +
-- lent(): the class key's count as the pass has it, with the seats
-- granted earlier in the pass. The first ticket short only of seats
-- (capgate.Waitlist: it needs more than one seat in every lane it doesn't
-- fit, each of those has room for a call of one seat and is not its user
-- lane, and its seats there are at most its limit, all by its limit with
-- what the lane lends it now) sets the free seats of those lanes aside:
-- the tickets after it see them taken. It stops early, without reading a
-- ticket, once the first lane every ticket shares (api_heavy) is full,
-- with what is set aside, even for the largest limit any ticket has on it:
-- then nothing can be granted (see note_first). It returns the seats set
-- aside by lane key, or nil when none were.
local function pass(w, now)
  local st = redis.call('HMGET', w.s, 'v', 'k1', 'l1')
  local v, k1, l1 = tonumber(st[1] or '0'), st[2], tonumber(st[3] or '0')
  local counts, aside = {}, nil
  -- used returns k's count in the pass, plus what is set aside there.
  local function used(k)
    local n = counts[k]
    if n == nil then
      n = count(k, now)
      counts[k] = n
    end
    if aside and aside[k] then return n + aside[k] end
    return n
  end
  local function shut()
    if not k1 or k1 == '' then return false end
    return used(k1) >= l1
  end
  if shut() then return nil end
  drop_expired(w, now)
  -- The tickets are read a page at a time, so a pass that grants the
  -- first ticket it reads costs O(log n), not a read of the whole list.
  local granted, pos, done = false, 0, false
  while not done do
    local q = redis.call('ZRANGE', w.q, pos, pos + 63, 'WITHSCORES')
    if #q == 0 then break end
    pos = pos + #q / 2
    for i = 1, #q, 2 do
      local m, s = q[i], tonumber(q[i + 1])
      local token = string.sub(m, 18)
      local raw = redis.call('HGET', w.t, token)
      if not raw then
        redis.call('ZREM', w.q, m)
        pos = pos - 1
      else
        local tk = cjson.decode(raw)
        local ts, fits, short = tk.s, true, true -- ts: seats, nil for 1 each
        local tl = tk.l -- its limits, with what each lane lends it now
        if tk.b then
          tl = {}
          for j, e in ipairs(tk.b) do
            tl[j] = tk.l[j]
            if e[1] ~= '' then
              local c = counts[e[1]]
              if c == nil then
                c = count(e[1], now)
                counts[e[1]] = c
              end
              tl[j] = tl[j] + lent(w, e, c)
            end
          end
        end
        for j, k in ipairs(tk.k) do
          local n, need = counts[k], ts and ts[j] or 1
          if n == nil then
            n = count(k, now)
            counts[k] = n
          end
          if aside and aside[k] then n = n + aside[k] end -- used(k), inline
          if n + need > tl[j] then
            fits = false
            -- Blocked as a call of one seat would be, or by its own lane.
            if need == 1 or n >= tl[j] or need > tl[j] or j == tk.ul then short = false end
          end
        end
        if fits then
          local most = 1
          for j, k in ipairs(tk.k) do
            local need = ts and ts[j] or 1
            counts[k] = counts[k] + need
            add(k, token, now, tk.c, need)
            if need > most then most = need end
          end
          if s > v then v = s end
          fair_start(w, token, tk.u, most, tk.e, tk.fb, true, now, tk.k[1])
          granted = true
          remove_ticket(w, token, tk, true)
          pos = pos - 1
          redis.call('PUBLISH', tk.n, token)
        elseif short and not aside then
          aside = {}
          for j, k in ipairs(tk.k) do
            local n = used(k)
            if n + (ts and ts[j] or 1) > tl[j] then aside[k] = tl[j] - n end
          end
        end
        if (fits or aside) and shut() then
          done = true
          break
        end
      end
    end
  end
  if granted then redis.call('HSET', w.s, 'v', v) end
  reset_if_empty(w)
  return aside
end

-- holds reports whether token holds an unexpired lease in every key.
local function holds(keys, token, now)
  for _, k in ipairs(keys) do
    local e = redis.call('ZSCORE', k, token)
    if not e or tonumber(e) <= now then return false end
  end
  return #keys > 0
end

-- where returns {state, next_ms}: state 2 = queued, 1 = holds its lease
-- (granted), 3 = dropped to make room (the mark is taken), 0 = neither; next_ms = ms until the earliest lease of a lane
-- full for the queued ticket (count + its seats > its limit, with what
-- the lane lends it now) expires, 0 when none.
--
-- limits, seats (nil: 1 in each lane) and borrow (nil: none; per lane as
-- a ticket's b), when limits are given, are the ticket's own (a pump's):
-- the ticket is then found queued by its expiry in the index, without
-- reading it.
local function where(w, token, keys, now, limits, seats, borrow)
  local queued
  if limits then
    queued = redis.call('ZSCORE', w.e, token) ~= false
  else
    local raw = redis.call('HGET', w.t, token)
    if raw then
      local tk = cjson.decode(raw)
      keys, limits, seats, borrow, queued = tk.k, tk.l, tk.s, tk.b, true
    end
  end
  if not queued then
    if redis.call('DEL', xk(w, token)) == 1 then return {3, 0} end
    if holds(keys, token, now) then return {1, 0} end
    return {0, 0}
  end
  local soonest = nil
  for j, k in ipairs(keys) do
    local limit = limits[j]
    if borrow and borrow[j][1] ~= '' then limit = limit + lent(w, borrow[j], count(borrow[j][1], now)) end
    if redis.call('ZCARD', k) + (seats and seats[j] or 1) > limit then
      local first = redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')
      if #first == 2 then
        local e = tonumber(first[2])
        if soonest == nil or e < soonest then soonest = e end
      end
    end
  end
  if soonest == nil then return {2, 0} end
  return {2, math.max(soonest - now, 1)}
end
