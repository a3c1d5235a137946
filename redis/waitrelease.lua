-- waitrelease: release a call's leases (every seat: the token, token#2,
-- ... up to the first missing one) and, when tickets wait under the
-- prefix, run the grant pass, so the freed seats are handed over at once.
--
-- KEYS:    the call's lane keys. ARGV[1]: the key prefix P.
-- ARGV[2]: the token. ARGV[3]: the user to charge ('' none) and
-- ARGV[4]: the cost (capgate.Charge; negative: nothing): see fair_charge.
--
-- Returns: 1 when the pass ran, else 0 (nobody waits: the fair tags,
--          when no call granted from the list runs, are deleted).
local token = ARGV[2]
for _, k in ipairs(KEYS) do
  -- token and token#2, then, when both were there, token#3, token#4, ...
  -- up to the first missing one.
  if redis.call('ZREM', k, token, seat(token, 2)) == 2 then drop_seats(k, token, 3) end
end
local w = wkeys(ARGV[1])
local now = now_ms()
fair_charge(w, token, ARGV[3] or '', tonumber(ARGV[4] or '-1'), now)
if redis.call('EXISTS', w.q) == 0 then
  -- The list's fair tags outlive its queue only while a call granted from
  -- it runs and holds its lease (fair_keeps, which drops the records of
  -- those that don't): when none does, they start over, as reset_if_empty
  -- would have them.
  if (redis.call('EXISTS', w.f) == 1 or redis.call('EXISTS', w.b .. 'rq') == 1) and not fair_keeps(w, now) then
    redis.call('DEL', w.f, w.s)
  end
  return 0
end
pass(w, now)
return 1
