-- delete_thread (and prune with strategy "delete"): drop the thread's log and indexes, record
-- the deletion in the audit stream of the slot, and start the log again with one
-- 'thread_deleted' event (checkpoint/projection.lua), which keeps every worker still holding the
-- deleted history from continuing it (checkpoint/append.lua), even once the id is used again. The
-- keys of a thread deleted and not used again expire after ARGV[4] ms.
-- The audit record (docs/audit.md) keeps what the deleted log was, none of its payloads: its
-- event count, last entry id and that entry's chain digest, so an export made before can be
-- matched against it. streamsaver never trims the audit stream. The thread_deleted event
-- carries the same, and 'upto': the greatest checkpoint id the deleted history held.
-- KEYS: log ix ptr feed audit   ARGV[1]: the feed's MAXLEN   ARGV[2]: 'chain' or ''
-- ARGV[3]: thread id   ARGV[4]: how long a deleted thread's keys stay, in ms
-- ARGV[5]: the saver's thread time to live in ms (0: none): they stay no longer, since the
-- thread would have expired by then anyway
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
cache, last = nil, nil

-- UNLINK: a long log, its indexes, are freed by a background thread, not by this script
redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3])
redis.call('XADD', KEYS[5], '*', 'k', 'thread_deleted', 'sv', tostring(SCHEMA), 'thread', ARGV[3],
           'n', tostring(n), 'last', last_id, 'head', head)
local ev = {'k', 'thread_deleted', 'sv', tostring(SCHEMA), 'thread', ARGV[3], 'n', tostring(n),
            'last', last_id, 'head', head, 'upto', upto}
local f = fields_of(ev)
local id
-- A log re-created after DEL numbers its entries afresh: within the millisecond of the last
-- deleted entry, the deletion could take the id of a deleted event, and a feed pointer to that
-- event would then read the deletion. Its id follows the last deleted one instead.
local after = nil
if last_id ~= '' then
  local ms, seq = string.match(last_id, '^(%d+)%-(%d+)$')
  local now = redis.call('TIME')
  if tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) <= tonumber(ms) then
    after = ms .. '-' .. string.format('%d', tonumber(seq) + 1)
  end
end
id, f.dg = append_event(KEYS[1], ev, after)
apply(KEYS[1], KEYS[2], KEYS[3], id, f)
notify(KEYS[4], ARGV[1], id, f)
local ttl = tonumber(ARGV[5]) or 0
expire_thread(KEYS[1], {KEYS[2], KEYS[3]}, (ttl > 0 and ttl < tonumber(ARGV[4])) and ttl or ARGV[4])
return n
