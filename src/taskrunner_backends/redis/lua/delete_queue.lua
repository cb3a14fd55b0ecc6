-- Delete every key of the queue, the held unique keys and the stored results
-- included, in one step.
--
-- KEYS: every fixed key of the queue (`QueueKeys.every_key`; KEYS[8] is `uniques`,
--       KEYS[13] `results`)
-- ARGV: 1 unique-key prefix, 2 result-key prefix
-- Returns nothing useful.

local uniques, results = KEYS[8], KEYS[13]
local uprefix, rprefix = ARGV[1], ARGV[2]

local function delete_indexed(index, prefix)
  local held = redis.call('ZRANGE', index, 0, -1)
  for i = 1, #held, 500 do
    local batch = {}
    for j = i, math.min(i + 499, #held) do
      batch[#batch + 1] = prefix .. held[j]
    end
    redis.call('DEL', unpack(batch))
  end
end

delete_indexed(uniques, uprefix)
delete_indexed(results, rprefix)
redis.call('DEL', unpack(KEYS))
return 0
