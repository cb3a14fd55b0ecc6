-- Flow control (taskrunner.queue_flow): the functions every script that makes a message
-- wait, frees a slot or cancels a waiting message shares. scripts.py puts this text in
-- front of those scripts; each sets flow.prefix (the queue's `flow_prefix`) and
-- flow.bell (its doorbell stream) before calling any of them. See keys.py for the keys.
--
-- A key with waiting messages is in exactly one of f:ring, f:slot and f:rate; one with
-- none is in none of them. Every step below is O(log n). Only commands of the
-- documented ACL (docs/redis.md): HGET and HSET, not INCR or HINCRBY.

local flow = {prefix = nil, bell = nil, rung = false}

-- The next number of the queue's flow order (hash f:seq, field n).
local function flow_next()
  local key = flow.prefix .. 'seq'
  local seq = tonumber(redis.call('HGET', key, 'n') or '0') + 1
  redis.call('HSET', key, 'n', seq)
  return seq
end


-- Wakes one blocked receive (once per script): a key may admit now.
local function flow_ring()
  if not flow.rung then
    redis.call('XADD', flow.bell, 'MAXLEN', '~', 64, '*', 'r', '1')
    flow.rung = true
  end
end

-- The flow key in a message's field list (field f), or nil.
local function flow_of(fields)
  for i = 1, #fields, 2 do
    if fields[i] == 'f' then
      return fields[i + 1]
    end
  end
  return nil
end

-- Parked entry `pid` of flow key `k` waits behind the key's waiting messages. A key that
-- had none joins the ring with its turn (that of its first wait if it never had one).
local function flow_wait(k, pid)
  local p = flow.prefix
  local seq = flow_next()
  local q = p .. 'q:' .. k
  redis.call('ZADD', q, seq, pid)
  redis.call('ZADD', p .. 'waiting', seq, pid)
  if redis.call('ZCARD', q) == 1 then
    local turn = redis.call('HGET', p .. 'turn', k)
    if not turn then
      turn = seq
      redis.call('HSET', p .. 'turn', k, seq)
    end
    redis.call('ZADD', p .. 'ring', turn, k)
    flow_ring()
  end
end

-- Admitted message `mid` gives its slot back, if it holds one (a final outcome or a
-- release). A key waiting for a slot rejoins the ring with its turn unchanged.
local function flow_free(mid)
  local p = flow.prefix
  local k = redis.call('HGET', p .. 'adm', mid)
  if not k then
    return
  end
  redis.call('HDEL', p .. 'adm', mid)
  redis.call('HDEL', p .. 'h:' .. k, mid)
  local turn = redis.call('ZSCORE', p .. 'slot', k)
  if turn then
    redis.call('ZREM', p .. 'slot', k)
    redis.call('ZADD', p .. 'ring', turn, k)
    flow_ring()
  end
end

-- One command over `args` (a flat list after `key`), in chunks (Lua's unpack has a
-- stack limit); nothing when `args` is empty.
local function flow_chunked(cmd, key, args, step)
  step = step or 4000
  local i = 1
  while i <= #args do
    local last = math.min(#args, i + step - 1)
    redis.call(cmd, key, unpack(args, i, last))
    i = last + 1
  end
end

-- `flow_free` of every message id in `mids`: one HGET each, then one HDEL for all and
-- one HDEL and one ZSCORE per flow key among them (HGET, not HMGET: the documented
-- ACL of docs/redis.md is what users grant).
local function flow_free_all(mids)
  local p = flow.prefix
  local keys, order, held = {}, {}, {}
  for _, mid in ipairs(mids) do
    local k = redis.call('HGET', p .. 'adm', mid)
    if k then
      held[#held + 1] = mid
      if not keys[k] then
        keys[k] = {}
        order[#order + 1] = k
      end
      keys[k][#keys[k] + 1] = mid
    end
  end
  flow_chunked('HDEL', p .. 'adm', held)
  for _, k in ipairs(order) do
    flow_chunked('HDEL', p .. 'h:' .. k, keys[k])
    local turn = redis.call('ZSCORE', p .. 'slot', k)
    if turn then
      redis.call('ZREM', p .. 'slot', k)
      redis.call('ZADD', p .. 'ring', turn, k)
      flow_ring()
    end
  end
end

-- Waiting parked entry `pid` of key `k` stops waiting (cancel); false if it was not
-- waiting. A blocked key whose head may have changed rejoins the ring, where the next
-- admission judges its new head by that head's own limits.
local function flow_unwait(k, pid)
  local p = flow.prefix
  local q = p .. 'q:' .. k
  if redis.call('ZREM', q, pid) == 0 then
    return false
  end
  redis.call('ZREM', p .. 'waiting', pid)
  if redis.call('EXISTS', q) == 0 then
    redis.call('ZREM', p .. 'ring', k)
    redis.call('ZREM', p .. 'slot', k)
    redis.call('ZREM', p .. 'rate', k)
    return true
  end
  local turn = redis.call('ZSCORE', p .. 'slot', k)
  if turn then
    redis.call('ZREM', p .. 'slot', k)
  elseif redis.call('ZREM', p .. 'rate', k) == 1 then
    turn = redis.call('HGET', p .. 'turn', k)
  end
  if turn then
    redis.call('ZADD', p .. 'ring', turn, k)
    flow_ring()
  end
  return true
end

-- The lowest score of zset `key` as a number, or nil when it is empty.
local function flow_first_score(key)
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #first == 0 then
    return nil
  end
  return tonumber(first[2])
end

-- End of the shared flow functions.
