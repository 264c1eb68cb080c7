-- delete_thread (and prune with strategy "delete"): drop the thread's log and indexes, and leave
-- a small mark in their place: the thread's ptr holding its 'thread_deleted' event's fields
-- (checkpoint/projection.lua's restore_deleted()), which keeps every worker still holding the
-- deleted history from continuing it (checkpoint/append.lua), even once the id is used again:
-- the first write that uses it appends the event to the new log, which keeps it for good. A
-- mark of an id not used again expires after ARGV[4] ms, the audit retention
-- (docs/retention.md).
-- The event is the deletion's audit record (docs/audit.md): it keeps what the deleted log was,
-- none of its payloads: its event count, last entry id and that entry's chain digest, so an
-- export made before can be matched against it, and 'upto', the greatest checkpoint id the
-- deleted history held. The records of the id's earlier deletions (a thread deleted, used again,
-- deleted again) stay in the mark with it, those younger than the retention.
-- Earlier versions started a new log with the event (a stream costs 4.7 KB however little it
-- holds: Redis 7 allocates its node at stream-node-max-bytes) and appended the record to a
-- stream of the slot, 'audit', that nothing trimmed: no record goes there any more, and each
-- deletion trims that slot's stream to the retention (deleting it once empty).
-- KEYS: log ix ptr feed audit   ARGV[1]: the feed's MAXLEN   ARGV[2]: 'chain' or ''
-- ARGV[3]: thread id   ARGV[4]: the audit retention in ms (0: the mark stays until the id is
-- used again)
-- Returns the number of events the deleted log held (0: nothing to delete, nothing written).
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[3], 'd') == 1 then
  return 0
end
-- Everything is read before the first write, an UNLINK: on a server out of memory Redis refuses a
-- script whose first write may grow memory, not one that starts by freeing it.
local marks = redis.call('HMGET', KEYS[3], 'g', 'm')
local upto = marks[1] or ''
local function seen(id)
  if bytes_lt(upto, id) then
    upto = id
  end
end
-- The least string above every string that starts with s.
local function past(s)
  local i = #s
  while i > 0 and string.byte(s, i) == 255 do
    i = i - 1
  end
  return string.sub(s, 1, i - 1) .. string.char(string.byte(s, i) + 1)
end
-- Members sort by bytes, so a namespace's newest checkpoint is its last member: one lookup per
-- namespace, not a read of every checkpoint (a long thread's would hold the server for
-- seconds, and every tenant with it).
local from = '[c'
while true do
  local m = redis.call('ZRANGEBYLEX', KEYS[2], from, '(d', 'LIMIT', 0, 1)[1]
  if not m then
    break
  end
  local ns = split_lp(string.sub(m, 2))
  local ns_end = past('c' .. lp(ns))
  local newest = redis.call('ZREVRANGEBYLEX', KEYS[2], '(' .. ns_end, '-', 'LIMIT', 0, 1)[1]
  local _, id = split_lp(string.sub(newest, 2))
  seen(id)
  from = '[' .. ns_end
end
-- checkpoints delete_for_runs removed may be the newest: its records name them. 'm' holds the
-- greatest; indexes projected before 'm' existed lack it, and then every record is read (each
-- says its greatest as 'upto'; earlier ones are unpacked)
local cache = {}
if marks[2] then
  seen(marks[2])
else
  for _, m in ipairs(redis.call('ZRANGEBYLEX', KEYS[2], '[e', '[e\255')) do
    local f = entry_fields(KEYS[1], string.sub(m, 2), cache)
    if f and f.k == 'delete' and type(f.upto) == 'string' then
      seen(f.upto)
    elseif f and f.k == 'delete' then
      local ok, items = pcall(cmsgpack.unpack, f.items or '\144')
      for i = 2, ok and type(items) == 'table' and #items or 0, 2 do
        if type(items[i]) == 'string' then
          seen(items[i])
        end
      end
    end
  end
end
local n = redis.call('XLEN', KEYS[1])
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1]
local last_id, head = last and last[1] or '', last and fields_of(last[2]).dg or ''
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local retention = tonumber(ARGV[4]) or 0
local horizon = retention > 0 and now_ms - retention or 0
-- the records of earlier deletions, in the ix as every record is ('e' members), oldest first;
-- each without its chain fields (the new log chains them anew)
local earlier = {}
for _, m in ipairs(redis.call('ZRANGEBYLEX', KEYS[2], '[e', '[e\255')) do
  local eid = string.sub(m, 2)
  local f = entry_fields(KEYS[1], eid, cache)
  if f and f.k == 'thread_deleted' and tonumber(string.match(eid, '^(%d+)')) >= horizon then
    local r = redis.call('XRANGE', KEYS[1], eid, eid)[1][2]
    local ev = {}
    for i = 1, #r, 2 do
      if r[i] ~= 'ch' and r[i] ~= 'dg' then
        ev[#ev + 1], ev[#ev + 2] = r[i], r[i + 1]
      end
    end
    earlier[#earlier + 1] = {eid, ev}
  end
end
table.sort(earlier, function(a, b)
  local am, as = string.match(a[1], '^(%d+)%-(%d+)$')
  local bm, bs = string.match(b[1], '^(%d+)%-(%d+)$')
  return tonumber(am) < tonumber(bm) or (am == bm and tonumber(as) < tonumber(bs))
end)
cache, last = nil, nil

-- UNLINK: a long log, its indexes, are freed by a background thread, not by this script
redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3])
if retention > 0 and redis.call('XTRIM', KEYS[5], 'MINID', string.format('%d', horizon)) > 0 and
    redis.call('XLEN', KEYS[5]) == 0 then
  redis.call('DEL', KEYS[5])
end
local ev = {'k', 'thread_deleted', 'sv', tostring(SCHEMA), 'thread', ARGV[3], 'n', tostring(n),
            'last', last_id, 'head', head, 'upto', upto}
-- Its id follows the last deleted event's: a feed pointer to a deleted event must never name
-- the deletion, in the millisecond of the last deleted event
local id = string.format('%d', now_ms) .. '-0'
if last_id ~= '' then
  local ms, seq = string.match(last_id, '^(%d+)%-(%d+)$')
  if now_ms <= tonumber(ms) then
    id = ms .. '-' .. string.format('%d', tonumber(seq) + 1)
  end
end
local mark = {'d', id, 'Dt', ARGV[3], 'Dn', tostring(n), 'Dl', last_id, 'Dh', head}
if upto ~= '' then
  mark[#mark + 1], mark[#mark + 2] = 'g', upto
end
if #earlier > 0 then
  local events = {}
  for _, e in ipairs(earlier) do
    events[#events + 1], events[#events + 2] = e[1], e[2]
  end
  mark[#mark + 1], mark[#mark + 2] = 'DP', cmsgpack.pack(events)
end
redis.call('HSET', KEYS[3], unpack(mark))
if retention > 0 then
  redis.call('PEXPIRE', KEYS[3], retention)
end
notify(KEYS[4], ARGV[1], id, fields_of(ev))
return n
