-- Delete every key of the queue, the held unique keys included, in one step.
--
-- KEYS: every fixed key of the queue (`QueueKeys.every_key`; KEYS[8] is `uniques`)
-- ARGV: 1 unique-key prefix
-- Returns nothing useful.

local uniques, uprefix = KEYS[8], ARGV[1]
local held = redis.call('ZRANGE', uniques, 0, -1)
for i = 1, #held, 500 do
  local batch = {}
  for j = i, math.min(i + 499, #held) do
    batch[#batch + 1] = uprefix .. held[j]
  end
  redis.call('DEL', unpack(batch))
end
redis.call('DEL', unpack(KEYS))
return 0
