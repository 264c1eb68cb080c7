-- The projection: how one event changes a thread's indexes. This is the only definition of it:
-- checkpoint/append.lua calls apply() right after its XADD, and checkpoint/replay.lua,
-- checkpoint/import.lua and checkpoint/compact.lua call it for stored entries, so incremental
-- indexes and rebuilt ones cannot drift apart. Nothing here may fail once the event is appended:
-- Redis does not roll a script back.

-- Where apply() writes. The writer writes straight to Redis. A replay starts from emptied keys
-- that nothing else can touch until its script ends, so it keeps them in Lua tables and writes
-- each key once, in bulk, at the end (about five times fewer commands per event). Either way the
-- same apply functions below decide what is written: only where it goes differs.
local direct = {
  zadd = function(key, m) redis.call('ZADD', key, 0, m) end,
  zrem = function(key, m) redis.call('ZREM', key, m) end,
  hget = hget,
  hmget = hmget,
  hset = function(key, k, v) redis.call('HSET', key, k, v) end,
  -- flat {field, value, ...}
  hset_many = function(key, pairs)
    for s = 1, #pairs, 1000 do
      redis.call('HSET', key, unpack(pairs, s, math.min(s + 999, #pairs)))
    end
  end,
  hsetnx = function(key, k, v) redis.call('HSETNX', key, k, v) end,
  hdel = function(key, k) redis.call('HDEL', key, k) end,
}
local sink = direct

-- layered: the keys already hold what earlier slices of a sliced replay
-- (checkpoint/replay_slice.lua) wrote, so a read the buffer cannot answer falls through to Redis,
-- and a removal is kept (as false) to be written out too.
local function buffered(layered)
  local data = {}
  local function of(key)
    local t = data[key]
    if t == nil then
      t = {}
      data[key] = t
    end
    return t
  end
  -- a removal over earlier slices' keys is kept as false, to be written out; over empty keys
  -- it only forgets what this call buffered (`layered and false or nil` would always be nil:
  -- a later slice's removals were lost, and a rebuild kept what a later event removed)
  local function gone(key, m)
    if layered then
      of(key)[m] = false
    else
      of(key)[m] = nil
    end
  end
  local b = {
    zadd = function(key, m) of(key)[m] = '' end,
    zrem = gone,
    hset = function(key, k, v) of(key)[k] = v end,
    hdel = gone,
  }
  function b.hget(key, k)
    local v = of(key)[k]
    if v == nil and layered then
      v = redis.call('HGET', key, k)
    end
    return v or nil
  end
  function b.hmget(key, ks)
    local out = {}
    for i, k in ipairs(ks) do
      out[i] = b.hget(key, k) or false
    end
    return out
  end
  function b.hset_many(key, pairs)
    for i = 1, #pairs, 2 do
      b.hset(key, pairs[i], pairs[i + 1])
    end
  end
  function b.hsetnx(key, k, v)
    if b.hget(key, k) == nil then
      of(key)[k] = v
    end
  end
  -- write every key out: zset members with score 0, hash fields with their values
  function b.flush(zsets)
    for key, t in pairs(data) do
      local args, gone, zset = {}, {}, zsets[key]
      for k, v in pairs(t) do
        if v == false then
          gone[#gone + 1] = k
        else
          if zset then
            args[#args + 1] = 0
          end
          args[#args + 1] = k
          if not zset then
            args[#args + 1] = v
          end
        end
        if #args >= 1000 then
          redis.call(zset and 'ZADD' or 'HSET', key, unpack(args))
          args = {}
        end
        if #gone >= 1000 then
          redis.call(zset and 'ZREM' or 'HDEL', key, unpack(gone))
          gone = {}
        end
      end
      if #args > 0 then
        redis.call(zset and 'ZADD' or 'HSET', key, unpack(args))
      end
      if #gone > 0 then
        redis.call(zset and 'ZREM' or 'HDEL', key, unpack(gone))
      end
    end
    data = {}
  end
  return b
end

-- Each kind has a check, which decodes and validates everything its apply needs, and an apply,
-- which only writes. A stored entry that fails its check (hand-written, truncated, from a buggy
-- writer) is skipped whole by replay and refused by append before anything is written.

local function unpack_list(raw, stride, what)
  if type(raw) ~= 'string' then
    return nil, 'no ' .. what
  end
  local ok, list = pcall(cmsgpack.unpack, raw)
  if not ok or type(list) ~= 'table' or #list % stride ~= 0 then
    return nil, 'bad ' .. what
  end
  return list
end

local function all_strings(list, from, stride)
  for i = from, #list, stride do
    if type(list[i]) ~= 'string' then
      return false
    end
  end
  return true
end

-- What a checkpoint's value parts reference must be stored: an append part's base version
-- (in ptr, or among the event's own values, as a compaction's copy carries the chain it needs)
-- and the write a shared part names. Otherwise a read would build the value from parts that
-- are not there: the event is skipped whole, named, like any malformed one. The writer checked
-- the same before its XADD (checkpoint/append.lua), so it never appends an event this refuses.
-- cache: entries read so far (shared/common.lua's entry_fields()), shared with the caller's own
-- checks. known: the base pointers the caller read already ({field = value}), not read again.
local function value_refs(log, ptr, f, nv, cache, known)
  local p, own = lp(f.ns), {}
  cache, known = cache or {}, known or {}
  for i = 1, #nv, 3 do
    own[lp(nv[i]) .. nv[i + 1]] = true
  end
  for i = 1, #nv, 3 do
    local channel, version, base = nv[i], nv[i + 1], nv[i + 2]
    local problem = shared_problem(log, f['b' .. ((i - 1) / 3)], cache)
    if problem then
      return 'channel ' .. channel .. ' version ' .. version .. ' is ' .. problem
    end
    local field = base ~= '' and not own[lp(channel) .. base] and 'b' .. p .. lp(channel) .. base
    if field and not (known[field] or sink.hget(ptr, field)) then
      return 'channel ' .. channel .. ' version ' .. version .. ' appends to version ' .. base ..
        ', which is not stored'
    end
  end
  return nil
end

local function checkpoint_shape(f)
  if type(f.ns) ~= 'string' or type(f.id) ~= 'string' or f.id == '' then
    return nil, 'no ns or id'
  end
  local ok, meta = pcall(cmsgpack.unpack, f.meta or '')
  if type(f.cp) ~= 'string' or not ok or type(meta) ~= 'table' then
    return nil, 'bad cp or meta'
  end
  local cv, why = unpack_list(f.cv, 2, 'cv')
  if not cv or not all_strings(cv, 1, 1) then
    return nil, why or 'bad cv'
  end
  local nv
  nv, why = unpack_list(f.nv, 3, 'nv')
  if not nv or not all_strings(nv, 1, 1) then
    return nil, why or 'bad nv'
  end
  for i = 1, #nv, 3 do
    if type(f['b' .. ((i - 1) / 3)]) ~= 'string' then
      return nil, 'missing value field'
    end
  end
  -- cv third: only a writer's dangling() reads it
  return nv, nil, cv
end

-- A checkpoint or writes event uses the thread's id again: it is no longer deleted
-- (apply_thread_deleted). known: ptr fields the caller read in this call ({field = value, or
-- false when absent}); a writer whose marks found no 'd' spares the HDEL.
local function undelete(ptr, known)
  if known.d ~= false then
    sink.hdel(ptr, 'd')
  end
end

local function apply_checkpoint(log, ix, ptr, id, f, nv, known)
  local p = lp(f.ns)
  local member = 'c' .. p .. f.id
  sink.zadd(ix, member)
  -- re-putting a checkpoint id points it at the newest event: the last put wins, once
  sink.hset(ptr, member, id)
  if f.run ~= nil and f.run ~= '' then
    sink.zadd(ix, 'r' .. lp(f.run) .. p .. f.id)
  end
  -- nv: [channel, version, base, ...]; the i-th value is field b<i-1>; a base marks an
  -- append part, whose earlier items are the value stored for (channel, base)
  for i = 1, #nv, 3 do
    local ref = id .. ' b' .. ((i - 1) / 3)
    if nv[i + 2] ~= '' then
      ref = ref .. ' ' .. nv[i + 2]
    end
    -- a version names one value: the first stored stays, so a delta's base cannot change
    sink.hsetnx(ptr, 'b' .. p .. lp(nv[i]) .. nv[i + 1], ref)
  end
  undelete(ptr, known)
end

-- The (channel, version) pairs of a checkpoint event's cv that are neither among its own values
-- (nv) nor stored in its namespace. A writer whose history is gone (a restart from an older
-- snapshot, an expiry, an eviction, a prune) would otherwise store a checkpoint no read can give
-- back whole: then the first such pair is returned, to refuse the put. That loss takes the
-- checkpoint the writer continues with it (values leave only with every checkpoint naming them),
-- so while that parent is live in ix every value the writer was handed back is stored, and a
-- pair nothing stores is one the thread never held under that name: LangGraph renames channels
-- when it migrates an older checkpoint (start:X to branch:to:X, keeping the version). Those
-- channels come back as a third result, {channel, ...}, for the writer to store with the
-- checkpoint (its value, or the empty marker). One HEXISTS per channel the checkpoint did not
-- change. nv and cv as checkpoint_shape() decoded them.
local function dangling(ptr, ix, f, nv, cv)
  local own, unstored = {}, {}
  for i = 1, #nv, 3 do
    own[lp(nv[i]) .. nv[i + 1]] = true
  end
  local p, parent, live = lp(f.ns), f.parent or '', nil
  for i = 1, #cv, 2 do
    local channel, version = cv[i], cv[i + 1]
    if not own[lp(channel) .. version]
        and redis.call('HEXISTS', ptr, 'b' .. p .. lp(channel) .. version) == 0 then
      if live == nil then
        live = parent ~= '' and redis.call('ZSCORE', ix, 'c' .. p .. parent) ~= false
      end
      if not live then
        return channel, version
      end
      unstored[#unstored + 1] = channel
    end
  end
  return nil, nil, unstored[1] and unstored
end

local function check_writes(f)
  if type(f.ns) ~= 'string' or type(f.id) ~= 'string' or type(f.task) ~= 'string' then
    return nil, 'no ns, id or task'
  end
  if type(f.path) ~= 'string' then
    return nil, 'no path'
  end
  local wi, why = unpack_list(f.wi, 2, 'wi')
  if not wi then
    return nil, why
  end
  for i = 1, #wi, 2 do
    if type(wi[i]) ~= 'string' or type(wi[i + 1]) ~= 'number'
        or type(f['w' .. ((i - 1) / 2)]) ~= 'string' then
      return nil, 'bad write ' .. ((i - 1) / 2)
    end
  end
  return wi
end

-- Up to this many pending writes of a checkpoint stay one msgpack list in its 'w' field
-- (shared/common.lua's pending_writes() reads both layouts): a field each costs a hash entry, ~125
-- bytes, and a typical step's one write would take three (w, v, u). Re-packing a list this
-- short costs less than the fields would; past it, fan-outs stay O(their own writes).
local SMALL_WRITES = 8

-- The list {task, idx, event id, pos, ...} with a writes event's writes added, as the fields
-- below would hold them, or nil when it would grow past SMALL_WRITES.
local function added_writes(l, id, f, wi)
  for i = 1, #wi, 2 do
    local idx, j = wi[i + 1], nil
    for k = 1, #l, 4 do
      if l[k] == f.task and l[k + 1] == idx then
        j = k
      end
    end
    if j == nil then
      if #l >= 4 * SMALL_WRITES then
        return nil
      end
      j = #l + 1
      l[j], l[j + 1] = f.task, idx
    elseif idx >= 0 then
      j = nil  -- ordinary writes keep the first copy; special ones the latest (below)
    end
    if j then
      l[j + 2], l[j + 3] = id, (i - 1) / 2
    end
  end
  return l
end

-- A checkpoint's pending writes: one list while they are few, then one ptr field each
-- (shared/common.lua's pending_writes()), so a put_writes reads and writes the fields of its own
-- writes only.
local function apply_writes(log, ix, ptr, id, f, wi, known)
  local p = lp(f.ns)
  local count = 'w' .. p .. f.id
  local slot, seen = 'v' .. p .. lp(f.id), 'u' .. p .. lp(f.id) .. lp(f.task)
  local names = {count}
  for i = 1, #wi, 2 do
    names[#names + 1] = seen .. tostring(wi[i + 1])
  end
  local got = sink.hmget(ptr, names)
  local n, sets = tonumber(got[1]), {}
  if n == nil or n == 0 then
    local l = added_writes(n == nil and got[1] and cmsgpack.unpack(got[1]) or {}, id, f, wi)
    if l then
      sink.hset_many(ptr, {count, cmsgpack.pack(l)})
      undelete(ptr, known)
      return
    end
  end
  if got[1] and not n then
    -- past SMALL_WRITES: the list moves to one field each, then is read again
    local l = cmsgpack.unpack(got[1])
    for i = 1, #l, 4 do
      local j = (i + 3) / 4
      sets[#sets + 1] = 'u' .. p .. lp(f.id) .. lp(l[i]) .. tostring(l[i + 1])
      sets[#sets + 1] = tostring(j)
      sets[#sets + 1] = slot .. j
      sets[#sets + 1] = l[i + 2] .. ' ' .. l[i + 3] .. ' ' .. tostring(l[i + 1]) .. ' ' .. l[i]
    end
    sets[#sets + 1] = count
    sets[#sets + 1] = tostring(#l / 4)
    sink.hset_many(ptr, sets)
    got, sets = sink.hmget(ptr, names), {}
    n = tonumber(got[1])
  end
  n = n or 0
  local at, grew = {}, false
  for i = 1, #wi, 2 do
    local idx = tostring(wi[i + 1])
    local record = id .. ' ' .. ((i - 1) / 2) .. ' ' .. idx .. ' ' .. f.task
    local j = at[idx] or tonumber(got[(i + 1) / 2 + 1])
    if j == nil then
      n, grew = n + 1, true
      j = n
      sets[#sets + 1] = seen .. idx
      sets[#sets + 1] = tostring(j)
      sets[#sets + 1] = slot .. j
      sets[#sets + 1] = record
    elseif wi[i + 1] < 0 then
      -- special channels (error, interrupt, resume...) report the latest state: overwrite;
      -- ordinary writes keep the first copy, so a retried task cannot double them
      sets[#sets + 1] = slot .. j
      sets[#sets + 1] = record
    end
    at[idx] = j
  end
  if grew or n == 0 then
    -- a writes event with no write still marks its checkpoint as having pending writes
    sets[#sets + 1] = count
    sets[#sets + 1] = tostring(n)
  end
  if #sets > 0 then
    sink.hset_many(ptr, sets)
  end
  undelete(ptr, known)
end

-- Forget checkpoint `cid`'s pending writes (a delete).
local function drop_pending(ptr, p, cid)
  local l = pending_writes(ptr, p, cid, sink.hget, sink.hmget)
  sink.hdel(ptr, 'w' .. p .. cid)
  for i = 1, #l, 4 do
    sink.hdel(ptr, 'u' .. p .. lp(cid) .. lp(l[i]) .. tostring(l[i + 1]))
    sink.hdel(ptr, 'v' .. p .. lp(cid) .. ((i + 3) / 4))
  end
end

local function check_delete(f)
  local items, why = unpack_list(f.items, 2, 'items')
  if not items or not all_strings(items, 1, 1) then
    return nil, why or 'bad items'
  end
  return items
end

-- The greatest checkpoint id (by bytes) that `items` ({ns, checkpoint id, ...}) name, or
-- `floor` if none is greater.
local function greatest_id(items, floor)
  local greatest = floor
  for i = 2, #items, 2 do
    if bytes_lt(greatest, items[i]) then
      greatest = items[i]
    end
  end
  return greatest
end

-- The 'delete' event naming `items` ({ns, checkpoint id, ...}) of thread `thread`, of `runs`.
-- 'upto', the greatest id among them, spares checkpoint/delete_thread.lua unpacking every record.
local function deleted_event(thread, items, runs)
  return {'k', 'delete', 'sv', tostring(SCHEMA), 'thread', thread, 'items', cmsgpack.pack(items),
          'runs', cmsgpack.pack(runs), 'upto', greatest_id(items, '')}
end

-- Besides each named checkpoint's 'x' mark, 'm': the greatest checkpoint id the thread's
-- records named (by bytes), so checkpoint/delete_thread.lua reads one field, not every record.
local function apply_delete(log, ix, ptr, id, f, items)
  for i = 1, #items, 2 do
    local p = lp(items[i])
    local member = 'c' .. p .. items[i + 1]
    local eid = sink.hget(ptr, member)
    if eid then
      local r = redis.call('XRANGE', log, eid, eid)[1]
      if r then
        local run = fields_of(r[2]).run
        if run ~= nil and run ~= '' then
          sink.zrem(ix, 'r' .. lp(run) .. p .. items[i + 1])
        end
      end
    end
    sink.zrem(ix, member)
    sink.hdel(ptr, member)
    drop_pending(ptr, p, items[i + 1])
    -- a worker that still holds it must not continue it (checkpoint/append.lua). Set last: freeing
    -- first lets checkpoint/delete_runs.lua run on a server out of memory
    -- (checkpoint/delete_thread.lua)
    sink.hset(ptr, 'x' .. p .. items[i + 1], id)
  end
  local greatest = greatest_id(items, sink.hget(ptr, 'm') or '')
  if greatest ~= '' then
    sink.hset(ptr, 'm', greatest)
  end
  -- channel values stay: later checkpoints may still read them
end

-- 'thread_deleted' (checkpoint/delete_thread.lua) starts the log of a deleted thread: the thread is
-- deleted until a checkpoint or writes use its id again ('d', its id, cleared by their apply),
-- and no event may continue a checkpoint up to 'upto', the greatest checkpoint id its deleted
-- histories held ('g', kept across reuses; checkpoint/append.lua). Checkpoint ids are uuid6 (they
-- sort by time), so what a new history writes sorts after it.
local function check_thread_deleted(f)
  if type(f.upto) ~= 'string' then
    return nil, 'no upto'
  end
  return true
end

local function apply_thread_deleted(log, ix, ptr, id, f)
  local g = sink.hget(ptr, 'g')
  if f.upto ~= '' and (not g or bytes_lt(g, f.upto)) then
    sink.hset(ptr, 'g', f.upto)
  end
  sink.hset(ptr, 'd', id)
end

-- A deleted thread's keys expire (checkpoint/delete_thread.lua) unless its id is used again: the
-- write that reuses it (whose apply cleared 'd') starts a thread that must not expire with that
-- record (expire_thread() then gives it the writer's time to live, if any).
local function reuse_deleted(log, ix, ptr)
  redis.call('PERSIST', log)
  redis.call('PERSIST', ix)
  redis.call('PERSIST', ptr)
end

-- 'pruned' (checkpoint/compact.lua) records what a prune trimmed, for the audit trail: nothing to
-- project
local function check_pruned(f)
  return true
end

local function apply_pruned()
end

local KINDS = {
  -- a checkpoint's third: what its values reference, checked after its shape
  checkpoint = {checkpoint_shape, apply_checkpoint, value_refs},
  writes = {check_writes, apply_writes},
  delete = {check_delete, apply_delete},
  pruned = {check_pruned, apply_pruned},
  thread_deleted = {check_thread_deleted, apply_thread_deleted},
}

-- The tombstone a prune appends before trimming every older entry: how many, their id range
-- and the digest of the last one (the tombstone's predecessor in the chain), none of their
-- payloads.
-- A log that starts with an earlier tombstone has its trimmed range and count carried on.
local function pruned_event(log)
  local first = redis.call('XRANGE', log, '-', '+', 'COUNT', 1)[1]
  local last = redis.call('XREVRANGE', log, '+', '-', 'COUNT', 1)[1]
  local ff, lf = fields_of(first[2]), fields_of(last[2])
  local from, n = first[1], redis.call('XLEN', log)
  if ff.k == 'pruned' and tonumber(ff.n) then
    from, n = ff.from or from, n - 1 + tonumber(ff.n)
  end
  return {'k', 'pruned', 'sv', tostring(SCHEMA), 'thread', lf.thread or '',
          'n', tostring(n), 'from', from, 'to', last[1], 'last', lf.dg or ''}
end

-- The checked event, ready for apply(): {its kind's apply, what it decoded, a checkpoint's cv};
-- nil and a reason for one this version cannot project (unknown kind, newer schema, malformed,
-- or referencing values not stored), which callers skip and report. log and ptr: where its
-- references are looked up; cache (optional): the entries already read (shared/common.lua's
-- entry_fields()). shape_only: references not checked (the writer checks them itself, after
-- its own checks of the same references, checkpoint/append.lua).
local function check(f, log, ptr, cache, shape_only)
  local kind = KINDS[f.k]
  if kind == nil then
    return nil, 'unknown kind ' .. tostring(f.k)
  end
  if (tonumber(f.sv) or 0) > SCHEMA or tonumber(f.sv) == nil then
    return nil, 'schema version ' .. tostring(f.sv)
  end
  local decoded, why, more = kind[1](f)
  if decoded == nil then
    return nil, why
  end
  if kind[3] and not shape_only then
    why = kind[3](log, ptr, f, decoded, cache)
    if why then
      return nil, why
    end
  end
  return {kind[2], decoded, more}
end

-- 'z' in ptr: about what a compaction of the log would spend, as bytes: its entries' field names
-- and values, and FIELD_BYTES more per field (a field, however short, costs a compaction about
-- 5 us beside 12 us per KB: a conversation of 20-byte messages kept as a chain of ~500 parts
-- took 2.7 ms), so a put can tell a compaction cheap enough for its own script from one to
-- leave to slices (checkpoint/append.lua); counting entries alone told neither. An estimate, not
-- compared by verify (checkpoint/refs.lua's may_lack()): a writer that finds none in a log
-- written before it existed counts from a size that sends the next compaction to slices, which
-- set it right.
local FIELD_BYTES = 256
local function entry_size(f)
  local n = 0
  for k, v in pairs(f) do
    n = n + #k + #v + FIELD_BYTES
  end
  if f.dg and not f.ch then
    -- a writer's fields as it sent them, whose digests append_event() added to the entry: the
    -- ch it added too (40 hex digits), so a writer counts what a replay of the entry counts
    n = n + 2 + 40 + FIELD_BYTES
  end
  return n
end

-- checked, known (optional): check()'s result and the ptr fields read, from a writer that
-- checked the event before appending it (checkpoint/append.lua); otherwise it is checked here.
local function apply(log, ix, ptr, id, f, cache, checked, known)
  -- the chain's head (append_event() in shared/common.lua) and the log's size ('z', below), for
  -- every entry, projectable or not, through the sink: a replay writes them once per slice, not
  -- once per entry
  local z = known and known.z
  if z == nil then
    z = sink.hget(ptr, 'z')
  end
  z = string.format('%d', (tonumber(z) or 0) + entry_size(f))
  if f.dg then
    sink.hset_many(ptr, {'h', f.dg, 'z', z})
  else
    sink.hdel(ptr, 'h')
    sink.hset(ptr, 'z', z)
  end
  if checked == nil then
    local why
    checked, why = check(f, log, ptr, cache)
    if checked == nil then
      return false, why
    end
  end
  checked[1](log, ix, ptr, id, f, checked[2], known or {})
  if f.k ~= 'checkpoint' and f.k ~= 'writes' and f.k ~= 'pruned' then
    -- a record: compactions find it here and keep it (checkpoint/compact.lua). A 'pruned' tombstone
    -- is not one: the next compaction's tombstone covers it, or keep_last's regular compactions
    -- would copy every earlier tombstone again each time
    redis.call('ZADD', ix, 0, 'e' .. id)
  end
  return true
end

-- A deleted thread whose id is not used again keeps no log, only its ptr, the deletion's mark
-- (checkpoint/delete_thread.lua): 'g' and 'd' as the thread_deleted event's apply sets them,
-- and the event's other fields: 'Dt' its thread, 'Dn' its count, 'Dl' its last id, 'Dh' its
-- head ('g' is its upto, 'd' its id). Each a field of its own, short: Redis keeps a hash of
-- values up to 64 bytes as a listpack, a few hundred bytes smaller than a hash table. 'DP', if
-- the id was deleted before, holds those deletions' events, msgpack {id, {field, value, ...},
-- ...}, oldest first. The first write that uses the id again (checkpoint/append.lua,
-- checkpoint/import.lua) appends them to the new log first, with their ids: the log then holds
-- what it held when each deletion wrote its event into it, so a rebuild replays 'g' and 'd'
-- back, and the new history follows them. Returns true if it appended them.
local MARK = {'d', 'g', 'Dt', 'Dn', 'Dl', 'Dh', 'DP'}
local function restore_deleted(log, ix, ptr)
  local m = redis.call('HMGET', ptr, unpack(MARK))
  if not m[3] or redis.call('EXISTS', log) == 1 then
    return false
  end
  redis.call('HDEL', ptr, 'Dt', 'Dn', 'Dl', 'Dh', 'DP')
  local events = m[7] and cmsgpack.unpack(m[7]) or {}
  events[#events + 1] = m[1]
  events[#events + 1] = {'k', 'thread_deleted', 'sv', tostring(SCHEMA), 'thread', m[3],
                         'n', m[4], 'last', m[5], 'head', m[6], 'upto', m[2] or ''}
  for i = 1, #events, 2 do
    local ev = events[i + 1]
    local f = fields_of(ev)
    local id
    id, f.dg = append_event(log, ev, events[i])
    apply(log, ix, ptr, id, f)
  end
  return true
end

-- Whether the thread is a deletion's mark alone (checkpoint/delete_thread.lua): no log, a ptr
-- that says deleted. Rebuilds and verifications leave it as it is: it holds what the deleted
-- log left, and no log replays it.
local function only_marked(log, ptr)
  return redis.call('EXISTS', log) == 0 and redis.call('HEXISTS', ptr, 'd') == 1
end

-- Replay the log's entries from `start` (an XRANGE start: '-', or '(' .. the last one done)
-- into ix and ptr through the sink, up to `count` per XRANGE (log_page()), each counted in
-- out[at] when applied, else in out[at + 1] with "<id> <reason>" appended while out holds
-- fewer than `most` items (nil: never). stop(id), if given, is asked after each entry and ends
-- the replay there. Returns true if it reached the log's end, and the last entry id it
-- replayed.
local function replay_range(log, ix, ptr, start, count, out, at, most, stop)
  local done, last = true, nil
  repeat
    local batch, asked = log_page(log, last and '(' .. last or start, count)
    for _, e in ipairs(batch) do
      local ok, why = apply(log, ix, ptr, e[1], fields_of(e[2]))
      if ok then
        out[at] = out[at] + 1
      else
        out[at + 1] = out[at + 1] + 1
        if most and #out < most then
          out[#out + 1] = e[1] .. ' ' .. why
        end
      end
      last = e[1]
      if stop and stop(last) then
        done = false
        break
      end
    end
  until not done or #batch < asked
  return done, last
end

-- Re-project a whole log into ix and ptr (emptied first), in order, as the writer did.
-- Returns {events applied, events skipped, "<id> <reason>" for the first 100 skipped}.
local function replay_into(log, ix, ptr)
  redis.call('DEL', ix, ptr)
  local out = {0, 0}
  sink = buffered()
  replay_range(log, ix, ptr, '-', 1000, out, 1, 102)
  sink.flush({[ix] = true})
  sink = direct
  return out
end
