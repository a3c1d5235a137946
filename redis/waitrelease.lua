-- waitrelease: release a call's leases and, when tickets wait under the
-- prefix, run the grant pass, so the freed slot is handed over at once.
--
-- KEYS:    the call's lane keys. ARGV[1]: the key prefix P.
-- ARGV[2]: the token.
--
-- Returns: 1 when the pass ran, else 0.
local token = ARGV[2]
for _, k in ipairs(KEYS) do redis.call('ZREM', k, token) end
local w = wkeys(ARGV[1])
if redis.call('EXISTS', w.q) == 0 then return 0 end
pass(w, now_ms())
return 1
