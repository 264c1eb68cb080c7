-- The projector's cross-thread projections, kept per Redis Cluster slot
-- (streamsaver/checkpoint/projections.py). Every projector script is one slot: its KEYS are that
-- slot's
--   KEYS[1] feed      the slot's feed (shared/common.lua's notify())
--   KEYS[2] state     hash: cursor (the last feed entry applied), applied (a count), at (ms),
--                     meta_form (META_FORM: how the meta members were built)
--   KEYS[3] registry  hash: thread id -> msgpack {latest root checkpoint id or '', its step or
--                     '', last activity ms, 1 if it waits on an interrupt else 0}
--   KEYS[4] activity  sorted set: thread id scored by last activity ms
--   KEYS[5] runs      sorted set (score 0): 'f' .. lp(run) .. thread  and  'r' .. lp(thread) .. lp(run)
--   KEYS[6] meta      sorted set (score 0): 'f' .. lp(key) .. lp(value) .. thread  and
--                     'r' .. lp(thread) .. lp(key) .. lp(value), for top-level metadata, each
--                     value as shared/meta.lua's indexed_form()
-- and the scripts reach the logs of the threads the feed names, which share that slot.
-- What a thread contributes is a function of its log and indexes only, so applying an entry
-- twice changes nothing, and a rebuild (projector/seed.lua) gives what incremental application
-- gave. runs and meta hold what any checkpoint event still in the log says (a superset of the live
-- checkpoints'): readers use them to pick candidate threads, then read each exactly.

-- The key prefix of a thread, as streamsaver/core/keys.py builds it (RFC 3986 unreserved kept).
local function thread_base(prefix, t)
  local tag = string.gsub(t, '[^%w%-%._~]', function(c)
    return string.format('%%%02X', string.byte(c))
  end)
  if tag == '' then
    tag = '%'
  end
  return prefix .. ':{' .. tag .. '}:'
end

local function id_parts(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end

local function id_lt(a, b)
  local am, as = id_parts(a)
  local bm, bs = id_parts(b)
  return am < bm or (am == bm and as < bs)
end

-- The slot's cursor, when the feed still holds every entry after it; nil otherwise (readers
-- then scan). A slot never seeded starts at '0-0' when its feed was never trimmed (Redis 7
-- reports max-deleted-entry-id); on 6.2, which does not, only a seed makes it usable, and a
-- cursor older than the first entry means entries were trimmed unapplied.
-- meta members built by an older version (cmsgpack's lossy values) name other values than
-- shared/meta.lua's forms: such a slot is not usable until seeded again, which marks it.
local META_FORM = '2'

local function usable_cursor(feed, state)
  local cursor = redis.call('HGET', state, 'cursor')
  if cursor and redis.call('HGET', state, 'meta_form') ~= META_FORM then
    return nil
  end
  if redis.call('EXISTS', feed) == 0 then
    return cursor or '0-0'
  end
  local info = redis.call('XINFO', 'STREAM', feed)
  for i = 1, #info, 2 do
    if info[i] == 'max-deleted-entry-id' then
      cursor = cursor or '0-0'
      if id_lt(cursor, info[i + 1]) then
        return nil
      end
      return cursor
    end
  end
  local first = redis.call('XRANGE', feed, '-', '+', 'COUNT', 1)[1]
  if not cursor or (first and cursor ~= '0-0' and id_lt(cursor, first[1])) then
    return nil
  end
  return cursor
end

-- Feed entries after the cursor (at most `count`, up to `stop`): always bounded, as a feed
-- holds up to its MAXLEN entries.
local function after_cursor(feed, cursor, stop, count)
  local start = cursor == '0-0' and '-' or '(' .. cursor
  return redis.call('XRANGE', feed, start, stop, 'COUNT', count)
end

-- The feed entries after the cursor, for a read that must name every thread they name; nil
-- when there are more than PENDING_MAX (a projector far behind, or none ever ran on a feed
-- never trimmed): reading them all would hold the server ~2 us each, up to the feed's MAXLEN,
-- and the caller answers 'fallback' instead (readers then list the threads another way).
local PENDING_MAX = 1000
local function pending_entries(feed, cursor)
  local entries = after_cursor(feed, cursor, '+', PENDING_MAX + 1)
  if #entries > PENDING_MAX then
    return nil
  end
  return entries
end

-- Thread ids named by feed entries, in order, each once.
local function named(entries)
  local seen, order = {}, {}
  for _, e in ipairs(entries) do
    local t = fields_of(e[2]).t
    if t and not seen[t] then
      seen[t] = true
      order[#order + 1] = t
    end
  end
  return order, seen
end

-- Whether a thread is live: its log exists and does not record its deletion (a deleted
-- thread's log holds its thread_deleted event until it expires or the id is used again).
local function live(log, ptr)
  return redis.call('EXISTS', log) == 1 and redis.call('HEXISTS', ptr, 'd') == 0
end

-- A thread's registry row, or nil when it is gone (deleted or expired); then the log's last
-- entry id, which it reads (projector/seed.lua stops there).
local function thread_row(log, ix, ptr)
  if redis.call('HEXISTS', ptr, 'd') == 1 then
    return nil
  end
  local last = redis.call('XREVRANGE', log, '+', '-', 'COUNT', 1)[1]
  if last == nil then
    return nil
  end
  local ms = id_parts(last[1])
  local top = redis.call('ZREVRANGEBYLEX', ix, '[c0:\255', '[c0:', 'LIMIT', 0, 1)[1]
  local cid, step, waiting, cache = '', '', 0, {}
  if top then
    cid = string.sub(top, 4)
    local eid = redis.call('HGET', ptr, top)
    local f = eid and entry_fields(log, eid, cache)
    if f then
      local ok, meta = pcall(cmsgpack.unpack, f.meta or '')
      if ok and type(meta) == 'table' and type(meta.step) == 'number' then
        step = tostring(meta.step)
      end
    end
    -- [task, idx, event id, pos, ...]: special channels have negative idx; look only at those
    local l = pending_writes(ptr, '0:', cid)
    for i = 1, #l, 4 do
      if l[i + 1] < 0 then
        local wf = entry_fields(log, l[i + 2], cache)
        if wf and cmsgpack.unpack(wf.wi)[l[i + 3] * 2 + 1] == '__interrupt__' then
          waiting = 1
        end
      end
    end
  end
  return {cid, step, ms, waiting}, last[1]
end

local function set_row(registry, activity, t, row)
  if row == nil then
    redis.call('HDEL', registry, t)
    redis.call('ZREM', activity, t)
  else
    redis.call('HSET', registry, t, cmsgpack.pack(row))
    redis.call('ZADD', activity, row[3], t)
  end
end

-- What a checkpoint event adds to runs and meta, collected as sets ({[key] = {[member] = true}})
-- and written once per batch by add_members().
local function index_event(acc, keys, t, f)
  if f.k ~= 'checkpoint' then
    return
  end
  -- no full check(): an event replay would skip only adds a candidate that reads find empty
  local ok, decoded = pcall(meta_fields, f.meta or '')
  if not ok then
    return
  end
  local lt = lp(t)
  local runs, meta = acc[keys[5]] or {}, acc[keys[6]] or {}
  acc[keys[5]], acc[keys[6]] = runs, meta
  if f.run ~= nil and f.run ~= '' then
    runs['f' .. lp(f.run) .. t] = true
    runs['r' .. lt .. lp(f.run)] = true
  end
  for k, form in pairs(decoded) do
    local kv = lp(k) .. lp(indexed_form(form))
    meta['f' .. kv .. t] = true
    meta['r' .. lt .. kv] = true
  end
end

local function add_members(acc)
  for key, members in pairs(acc) do
    local args = {}
    for m in pairs(members) do
      args[#args + 1] = 0
      args[#args + 1] = m
      if #args >= 1000 then
        redis.call('ZADD', key, unpack(args))
        args = {}
      end
    end
    if #args > 0 then
      redis.call('ZADD', key, unpack(args))
    end
  end
end

-- The lex range of t's 'r' members in one of runs/meta.
local function thread_members(t)
  local lt = lp(t)
  return '[r' .. lt, '[r' .. lt .. '\255'
end

-- How many members of key are t's (what unindex() removes).
local function indexed(key, t)
  return redis.call('ZLEXCOUNT', key, thread_members(t))
end

-- Drop what a thread contributes to one of runs/meta (its 'r' members name its 'f' members).
local function unindex(key, t)
  local lt = lp(t)
  local mine = redis.call('ZRANGEBYLEX', key, thread_members(t))
  for _, m in ipairs(mine) do
    redis.call('ZREM', key, m, 'f' .. string.sub(m, #lt + 2) .. t)
  end
end

-- A thread's whole contribution, from its log as it is now.
local function recompute(keys, prefix, t)
  local base = thread_base(prefix, t)
  local log = base .. 'log'
  unindex(keys[5], t)
  unindex(keys[6], t)
  local row = thread_row(log, base .. 'ix', base .. 'ptr')
  set_row(keys[3], keys[4], t, row)
  if row == nil then
    return
  end
  local start, acc = '-', {}
  while true do
    local batch = log_page(log, start, 1000)
    if #batch == 0 then
      add_members(acc)
      return
    end
    for _, e in ipairs(batch) do
      index_event(acc, keys, t, fields_of(e[2]))
    end
    start = '(' .. batch[#batch][1]
  end
end
