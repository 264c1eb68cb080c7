-- The projection: how one event changes a thread's indexes. This is the only definition of it:
-- append.lua calls apply() right after its XADD, and replay.lua, import.lua and compact.lua call
-- it for stored entries, so incremental indexes and rebuilt ones cannot drift apart.
-- Nothing here may fail once the event is appended: Redis does not roll a script back.

local function apply_checkpoint(log, ix, ptr, id, f)
  local p = lp(f.ns)
  local member = 'c' .. p .. f.id
  redis.call('ZADD', ix, 0, member)
  -- re-putting a checkpoint id points it at the newest event: the last put wins, once
  redis.call('HSET', ptr, member, id)
  if f.run ~= nil and f.run ~= '' then
    redis.call('ZADD', ix, 0, 'r' .. lp(f.run) .. p .. f.id)
  end
  -- nv: [channel, version, base, ...]; the i-th value is field b<i-1>; a base marks an
  -- append part, whose earlier items are the value stored for (channel, base)
  local nv = cmsgpack.unpack(f.nv)
  for i = 1, #nv, 3 do
    local ref = id .. ' b' .. ((i - 1) / 3)
    if nv[i + 2] ~= '' then
      ref = ref .. ' ' .. nv[i + 2]
    end
    -- a version names one value: the first stored stays, so a delta's base cannot change
    redis.call('HSETNX', ptr, 'b' .. p .. lp(nv[i]) .. nv[i + 1], ref)
  end
end

local function apply_writes(log, ix, ptr, id, f)
  local key = 'w' .. lp(f.ns) .. f.id
  local cur = redis.call('HGET', ptr, key)
  local list = {}
  if cur then
    list = cmsgpack.unpack(cur)
  end
  local at = {}
  for i = 1, #list, 4 do
    at[lp(list[i]) .. list[i + 1]] = i
  end
  local wi = cmsgpack.unpack(f.wi)
  for i = 1, #wi, 2 do
    local idx = wi[i + 1]
    local pos = (i - 1) / 2
    local k = lp(f.task) .. idx
    local j = at[k]
    if j == nil then
      list[#list + 1] = f.task
      list[#list + 1] = idx
      list[#list + 1] = id
      list[#list + 1] = pos
      at[k] = #list - 3
    elseif idx < 0 then
      -- special channels (error, interrupt, resume...) report the latest state: overwrite;
      -- ordinary writes keep the first copy, so a retried task cannot double them
      list[j + 2] = id
      list[j + 3] = pos
    end
  end
  redis.call('HSET', ptr, key, cmsgpack.pack(list))
end

local function apply_delete(log, ix, ptr, id, f)
  local items = cmsgpack.unpack(f.items)
  for i = 1, #items, 2 do
    local p = lp(items[i])
    local member = 'c' .. p .. items[i + 1]
    local eid = redis.call('HGET', ptr, member)
    if eid then
      local r = redis.call('XRANGE', log, eid, eid)[1]
      if r then
        local run = fields_of(r[2]).run
        if run ~= nil and run ~= '' then
          redis.call('ZREM', ix, 'r' .. lp(run) .. p .. items[i + 1])
        end
      end
    end
    redis.call('ZREM', ix, member)
    redis.call('HDEL', ptr, member, 'w' .. p .. items[i + 1])
  end
  -- channel values stay: later checkpoints may still read them
end

local APPLY = {checkpoint = apply_checkpoint, writes = apply_writes, delete = apply_delete}

-- false for an event this version cannot project (unknown kind or newer schema): the caller
-- reports it, and the indexes stay as they were
local function apply(log, ix, ptr, id, f)
  local fn = APPLY[f.k]
  if fn == nil or (tonumber(f.sv) or 0) > SCHEMA then
    return false
  end
  fn(log, ix, ptr, id, f)
  return true
end

-- Re-project a whole log into ix and ptr (emptied first), in order, as the writer did.
-- Returns {events applied, events skipped}.
local function replay_into(log, ix, ptr)
  redis.call('DEL', ix, ptr)
  local applied, skipped, start = 0, 0, '-'
  while true do
    local batch = redis.call('XRANGE', log, start, '+', 'COUNT', 1000)
    if #batch == 0 then
      return {applied, skipped}
    end
    for _, e in ipairs(batch) do
      if apply(log, ix, ptr, e[1], fields_of(e[2])) then
        applied = applied + 1
      else
        skipped = skipped + 1
      end
    end
    start = '(' .. batch[#batch][1]
  end
end
