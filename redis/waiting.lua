-- waiting: how many tickets wait on each lane.
--
-- KEYS:    lane keys. ARGV[1]: the key prefix P.
--
-- Returns: {n_1, ..., n_k}: the tickets waiting on KEYS[i] (expired
--          tickets are dropped first).
local w = wkeys(ARGV[1])
local res = {}
if redis.call('EXISTS', w.q) == 1 then
  drop_expired(w, now_ms())
  reset_if_empty(w)
end
for i, k in ipairs(KEYS) do
  res[i] = tonumber(redis.call('HGET', w.n, k) or '0')
end
return res
