-- Worker registry: publish one entry, or list the live ones; expired entries are pruned.
--
-- KEYS: 1 workers hash
-- ARGV: 1 op ("publish" | "live"); for publish also 2 instance, 3 TTL in ms,
--       4 the WorkerInfo as JSON
-- Returns: publish -> how many expired entries were pruned; live -> the live values.
--
-- Expiry is measured on the server's clock (TIME), so the clocks of the worker hosts
-- may disagree without shortening or stretching anybody's TTL. Each value is
-- '{"expires_ms":<ms>,"info":<WorkerInfo JSON>}'; a value of any other shape was not
-- written here and is pruned like an expired one. The hash as a whole expires with its
-- longest-lived entry, so a queue whose workers all died leaves nothing behind.

local key, op = KEYS[1], ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local live, expired = {}, {}
local longest = 0
local all = redis.call('HGETALL', key)
for i = 1, #all, 2 do
  local ms = tonumber(string.match(all[i + 1], '^{"expires_ms":(%d+),"info":') or '')
  if ms == nil or ms <= now then
    expired[#expired + 1] = all[i]
  else
    live[#live + 1] = all[i + 1]
    longest = math.max(longest, ms - now)
  end
end
if #expired > 0 then
  redis.call('HDEL', key, unpack(expired))
end

if op == 'live' then
  return live
elseif op ~= 'publish' then
  return redis.error_reply('ERR unknown worker registry operation ' .. tostring(op))
end

local ttl = tonumber(ARGV[3])
redis.call('HSET', key, ARGV[2],
  '{"expires_ms":' .. string.format('%.0f', now + ttl) .. ',"info":' .. ARGV[4] .. '}')
longest = math.max(longest, ttl)
if redis.call('PTTL', key) < longest then
  redis.call('PEXPIRE', key, longest)
end
return #expired
