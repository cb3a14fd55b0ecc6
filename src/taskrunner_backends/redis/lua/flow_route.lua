-- Record which key routes each flow key's messages on a partitioned queue (internal).
--
-- KEYS: 1 the route hash (f:route) of the flow key's home shard
-- ARGV: pairs of flow key, route (the flow's rate key when it has a rate, else its key)
-- Returns the route each key has: the one given when the key had none yet (now
--   recorded), else the one recorded before.
--
-- Check and record happen in one script, so of two adds racing with different routes
-- for one key exactly one records its route and the other learns of it.

local routes = KEYS[1]
local out = {}
for i = 1, #ARGV, 2 do
  local route = redis.call('HGET', routes, ARGV[i])
  if not route then
    route = ARGV[i + 1]
    redis.call('HSET', routes, ARGV[i], route)
  end
  out[#out + 1] = route
end
return out
