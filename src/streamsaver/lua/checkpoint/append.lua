-- Append one event to a thread's log and project it, atomically.
-- KEYS: log ix ptr feed (shared/common.lua)
-- ARGV[1]: the feed's MAXLEN (0: no pointer)   ARGV[2]: 'chain <ch>' (the event's ch, as the
--          client computed it), 'chain' or '' (shared/common.lua's append_event())
-- ARGV[3]: '' or, for a checkpoint with append parts, a msgpack list of the heads
--          ("<event id> <field>") the client saw for each part's base, in nv order
-- ARGV[4]: 'fence' to refuse a loop/input checkpoint whose parent is not the latest, or ''
-- ARGV[5]: the thread's time to live in ms, restarted by this write (0: none)
-- ARGV[6]: keep_last: checkpoints kept per namespace (0: all). A checkpoint that would make its
--          namespace hold more than twice as many compacts the thread first
--          (checkpoint/compact.lua), so the cost of a compaction is spread over keep_last puts.
--          Only the append_compacting entry, which includes checkpoint/compact.lua, is sent a
--          keep_last (streamsaver/lua/__init__.py)
-- ARGV[7..]: the event's fields, flat [field, value, ...]
-- Returns the new event id, {new event id, entries trimmed} when it compacted, {new event id,
-- -1} when a compaction is due but the log is too long for this call, or 'stale'
-- (nothing written) when a base is not what the client saw: the client then sends whole values
-- instead, or {'unstored', channel, ...} (nothing written) when the checkpoint names channels
-- at versions the thread never stored under those names while its parent is live: the client
-- sends it again with their values. Refusals are errors; nothing is written. A checkpoint whose
-- parent is gone naming a channel version that is neither its own nor stored is refused
-- (checkpoint/projection.lua's dangling()).

-- The largest log a put compacts in its own script (keep_last), in entries and in what its
-- fields hold (ptr's 'z', checkpoint/projection.lua's entry_size()): a compaction reads and copies
-- the log, about 5 us per field and 12 us per KB here (Redis 7.0), so these keep it within a
-- few slices' budget (shared/slice.lua, 0.25 ms by default); a larger one is left to slices
-- (checkpoint/compact_slice.lua). Bounded by entries alone (2,000), a put of 2 KB messages held
-- the server 97 ms, and one of a 300-step conversation, 20 entries, 3 ms.
local PUT_COMPACT_ENTRIES, PUT_COMPACT_BYTES = 100, 65536
-- a compaction in this call (checkpoint/compact.lua) copies events: it computes their ch itself
local ch = string.match(ARGV[2], '^chain (%x+)$')
local fields = {}
for i = 7, #ARGV do
  fields[i - 6] = ARGV[i]
end
local f = fields_of(fields)
-- decoded once, for the checks below and the projection; a malformed event (a writer other
-- than streamsaver's) is refused before anything is written, rather than logged unprojected
local checked, why = check(f, KEYS[1], KEYS[3], nil, true)
if not checked then
  return redis.error_reply('STREAMSAVER_MALFORMED ' .. tostring(f.k) .. ' event of thread ' ..
    tostring(f.thread) .. ' refused, nothing written: ' .. why)
end
-- Deleted history never comes back (checkpoint/projection.lua): the checkpoint this event continues
-- (a put's parent, the one writes belong to) must be neither one delete_for_runs removed ('x')
-- nor one of a deleted history: up to 'g' and not in the thread's current history. A put
-- without parent starts a new history, unless it is a subgraph's first checkpoint whose
-- parent namespaces' checkpoints (metadata 'parents') are deleted.
-- p: the event's namespace, length-prefixed as every index member and ptr field names it
local p = lp(f.ns)
local named = f.k == 'writes' and f.id or (f.k == 'checkpoint' and f.parent ~= '' and f.parent)
-- 'h', the chain's head (shared/common.lua's chain_head()), and 'z', the log's size, in the same
-- command: calls fewer
local marks = redis.call('HMGET', KEYS[3], 'g', 'd', 'x' .. p .. (named or ''), 'h', 'z')
heads[KEYS[1]] = marks[4] or nil
-- the ptr fields read here, that the projection need not read again (checkpoint/projection.lua's
-- apply())
local known = {d = marks[2], z = marks[5]}
if not known.z then
  -- a log written before the size was kept: as if too large to compact here, until a
  -- compaction in slices (or a rebuild) counts it
  known.z = redis.call('EXISTS', KEYS[1]) == 1 and tostring(PUT_COMPACT_BYTES + 1) or '0'
end
local function live(ns, id)
  return redis.call('ZSCORE', KEYS[2], 'c' .. lp(ns) .. id)
end
local function deleted_by(ns, id)
  if marks[1] and not bytes_lt(marks[1], id) and not live(ns, id) then
    return 'delete_thread'
  end
end
local refused = named
-- a checkpoint put again since delete_for_runs removed it is live: its writes are welcome
local by = named and (marks[3] and not live(f.ns, named) and 'delete_for_runs'
  or deleted_by(f.ns, named))
if not by and marks[1] and f.k == 'checkpoint' then
  local ok, meta = pcall(cmsgpack.unpack, f.meta or '')
  if ok and type(meta) == 'table' and type(meta.parents) == 'table' then
    for ns, id in pairs(meta.parents) do
      if not by and type(ns) == 'string' and type(id) == 'string' then
        refused, by = id, deleted_by(ns, id)
      end
    end
  end
end
if by then
  return redis.error_reply('STREAMSAVER_DELETED checkpoint ' .. refused .. ' of thread ' ..
    tostring(f.thread) .. ' was deleted (' .. by .. ') while this writer still had it; ' ..
    'start the thread afresh (a put without checkpoint_id), or reload it (get_tuple) and ' ..
    'continue from a checkpoint it holds')
end
if ARGV[4] == 'fence' and f.k == 'checkpoint' then
  local ok, meta = pcall(cmsgpack.unpack, f.meta or '')
  local source = ok and type(meta) == 'table' and meta.source or nil
  -- time travel and update_state fork on purpose; loops and inputs continue the latest
  if source ~= 'update' and source ~= 'fork' then
    local top = redis.call('ZREVRANGEBYLEX', KEYS[2], '[c' .. p .. '\255', '[c' .. p, 'LIMIT', 0, 1)[1]
    local latest = top and string.sub(top, #p + 2) or ''
    if latest ~= (f.parent or '') and latest ~= f.id then
      return redis.error_reply('STREAMSAVER_FENCED checkpoint ' .. tostring(f.id) .. ' continues ' ..
        (f.parent ~= '' and f.parent or 'nothing') .. ' but the latest in its namespace is ' ..
        latest .. ': another writer got there first; reload the thread (get_tuple) and retry')
    end
  end
end
if f.k == 'checkpoint' then
  local channel, version, unstored = dangling(KEYS[3], KEYS[2], f, checked[2], checked[3])
  if channel then
    return redis.error_reply(integrity('DANGLING', {KEYS[1], f.ns, f.id, channel, version}))
  end
  if unstored then
    -- nothing written: the writer sends the event again with these channels' values
    return {'unstored', unpack(unstored)}
  end
end
-- the entries the checks below read (a shared part's write): each read once
local cache = {}
if ARGV[3] ~= '' then
  local expected, j = cmsgpack.unpack(ARGV[3]), 1
  local nv = checked[2]
  for i = 1, #nv, 3 do
    if nv[i + 2] ~= '' then
      local field = 'b' .. p .. lp(nv[i]) .. nv[i + 2]
      local ref = redis.call('HGET', KEYS[3], field)
      known[field] = ref
      local want = expected[j]
      if not ref or (ref ~= want and string.sub(ref, 1, #want + 1) ~= want .. ' ') then
        return 'stale'
      end
      -- a prune may have trimmed the write a part names since the client appended it
      if shared_tail(KEYS[1], f['b' .. ((i - 1) / 3)], cache) == false then
        return 'stale'
      end
      j = j + 1
    end
  end
end
if f.k == 'checkpoint' then
  why = value_refs(KEYS[1], KEYS[3], f, checked[2], cache, known)
  if why then
    return redis.error_reply('STREAMSAVER_MALFORMED checkpoint ' .. f.id .. ' of thread ' ..
      tostring(f.thread) .. ' refused, nothing written: ' .. why)
  end
end
-- Whether the server is about out of memory (maxmemory): a compaction, which frees before it
-- copies (checkpoint/compact.lua), then runs in this script however long, since the append that
-- leaves it to slices would be refused for the memory it needs, and the thread could never
-- shrink. INFO is asked only when a compaction is due.
local function short_of_memory(need)
  local info = redis.call('INFO', 'memory')
  local most = tonumber(string.match(info, '\nmaxmemory:(%d+)'))
  local used = tonumber(string.match(info, '\nused_memory:(%d+)'))
  return most ~= nil and most > 0 and used ~= nil and used + need >= most
end

-- a deleted thread's id used again: its deletion's event, kept in ptr, starts the new log
-- (checkpoint/projection.lua's restore_deleted())
if marks[2] and restore_deleted(KEYS[1], KEYS[2], KEYS[3]) then
  known.z = redis.call('HGET', KEYS[3], 'z')
end
local keep, reply, due = tonumber(ARGV[6]), nil, false
if keep > 0 and f.k == 'checkpoint' then
  -- ZLEXCOUNT and XLEN are O(log n) and O(1), the size was read above: deciding costs no scan
  if redis.call('ZLEXCOUNT', KEYS[2], '[c' .. p, '[c' .. p .. '\255') >= 2 * keep then
    -- a compaction costs what the log holds, in entries and in bytes: past either bound it
    -- would hold the server longer than a few slices, and the saver runs it in slices after
    -- this append
    local size = entry_size(f)
    due = (redis.call('XLEN', KEYS[1]) > PUT_COMPACT_ENTRIES or
      tonumber(known.z) + size > PUT_COMPACT_BYTES) and not short_of_memory(size)
    if not due then
      local removed, ids = compact(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], keep, {fields})
      reply = {ids[1], removed}
    end
  end
end
if reply == nil then
  reply, f.dg = append_event(KEYS[1], fields, nil, ch)
  apply(KEYS[1], KEYS[2], KEYS[3], reply, f, cache, checked, known)
  notify(KEYS[4], ARGV[1], reply, f)
  if due then
    reply = {reply, -1}
  end
end
-- after the append: a write of a server out of memory is refused before it writes anything
if marks[2] then
  reuse_deleted(KEYS[1], KEYS[2], KEYS[3])
end
expire_thread(KEYS[1], {KEYS[2], KEYS[3]}, ARGV[5])
return reply
