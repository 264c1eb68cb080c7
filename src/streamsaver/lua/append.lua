-- Append one event to a thread's log and project it, atomically.
-- KEYS: log ix ptr feed gone (common.lua; gone: delete_thread.lua's tombstone)
-- ARGV[1]: the feed's MAXLEN (0: no pointer)   ARGV[2]: 'chain' or '' (common.lua)
-- ARGV[3]: '' or, for a checkpoint with append parts, a msgpack list of the heads
--          ("<event id> <field>") the client saw for each part's base, in nv order
-- ARGV[4]: 'fence' to refuse a loop/input checkpoint whose parent is not the latest, or ''
-- ARGV[5..]: the event's fields, flat [field, value, ...]
-- Returns the new event id, or 'stale' (nothing written) when a base is not what the client
-- saw: the client then sends whole values instead. Refusals are errors; nothing is written.
local fields = {}
for i = 5, #ARGV do
  fields[i - 4] = ARGV[i]
end
local f = fields_of(fields)
local continues = f.k == 'writes' or (f.k == 'checkpoint' and (f.parent or '') ~= '')
if KEYS[5] ~= nil and redis.call('EXISTS', KEYS[5]) == 1 then
  if continues then
    return redis.error_reply('STREAMSAVER_DELETED thread ' .. tostring(f.thread) .. ' was ' ..
      'deleted while this writer still had its history; start it afresh (a put without ' ..
      'checkpoint_id) to use the thread id again')
  end
  redis.call('DEL', KEYS[5])
end
if ARGV[4] == 'fence' and f.k == 'checkpoint' then
  local ok, meta = pcall(cmsgpack.unpack, f.meta or '')
  local source = ok and type(meta) == 'table' and meta.source or nil
  -- time travel and update_state fork on purpose; loops and inputs continue the latest
  if source ~= 'update' and source ~= 'fork' then
    local p = lp(f.ns or '')
    local top = redis.call('ZREVRANGEBYLEX', KEYS[2], '[c' .. p .. '\255', '[c' .. p, 'LIMIT', 0, 1)[1]
    local latest = top and string.sub(top, #p + 2) or ''
    if latest ~= (f.parent or '') and latest ~= f.id then
      return redis.error_reply('STREAMSAVER_FENCED checkpoint ' .. tostring(f.id) .. ' continues ' ..
        (f.parent ~= '' and f.parent or 'nothing') .. ' but the latest in its namespace is ' ..
        latest .. ': another writer got there first; reload the thread (get_tuple) and retry')
    end
  end
end
if ARGV[3] ~= '' then
  local expected, j = cmsgpack.unpack(ARGV[3]), 1
  local nv, p = cmsgpack.unpack(f.nv), lp(f.ns)
  for i = 1, #nv, 3 do
    if nv[i + 2] ~= '' then
      local ref = redis.call('HGET', KEYS[3], 'b' .. p .. lp(nv[i]) .. nv[i + 2])
      local want = expected[j]
      if not ref or (ref ~= want and string.sub(ref, 1, #want + 1) ~= want .. ' ') then
        return 'stale'
      end
      j = j + 1
    end
  end
end
local id
id, f.dg = append_event(KEYS[1], fields)
apply(KEYS[1], KEYS[2], KEYS[3], id, f)
notify(KEYS[4], ARGV[1], id, f)
return id
