-- Append a batch of events (copied from another thread) and project each.
-- KEYS: log ix ptr feed of the target   ARGV[1]: the feed's MAXLEN   ARGV[2]: 'chain' or ''
-- ARGV[3]: the target's time to live in ms, restarted by this write (0: none)
-- ARGV[4]: ms after which it stops, having appended at least one event (shared/slice.lua): a page's
-- events may cost more than the budget, and the caller sends the rest again
-- ARGV[5..]: per event, its field count, then its fields (without the source's ch and dg: the
-- copies are chained anew in the target)
-- Returns the number of events appended, the first ones of the page. A checkpoint whose append part
-- extends a version the target does not hold (the source's log is damaged: its own rebuild skips
-- the event) is an error naming the source's event, raised before that event is appended: a copy is
-- refused, as a write would be, rather than carried over unprojected.
-- A 'thread_deleted' event is refused: it belongs to the source's id (it keeps the source's old
-- workers from continuing its deleted history), and imported it would mark the target deleted,
-- vanishing from every list while its checkpoints still read. copy_thread copies a deleted and
-- reused source's history after it, never it. A 'pruned' tombstone is imported: a copy of a
-- compacted source starts with it, so its kept checkpoints' missing parents read as trimmed, as
-- in the source (copy_thread reads one version of the source, so it is only ever its first).
-- a copy into a deleted thread's id is a thread of its own (checkpoint/projection.lua's
-- reuse_deleted())
local deleted = redis.call('HEXISTS', KEYS[3], 'd') == 1
-- (its deletion's event, kept in ptr, starts the log: checkpoint/projection.lua's
-- restore_deleted())
if deleted then
  restore_deleted(KEYS[1], KEYS[2], KEYS[3])
end
local i, n, budget = 5, 0, tonumber(ARGV[4])
units_begin()
while i <= #ARGV and (n == 0 or not over(budget)) do
  local count = tonumber(ARGV[i])
  local ev = {}
  for j = 1, count do
    ev[j] = ARGV[i + j]
  end
  local f = fields_of(ev)
  if f.k == 'thread_deleted' then
    expire_thread(KEYS[1], {KEYS[2], KEYS[3]}, ARGV[3])
    return redis.error_reply('STREAMSAVER_MALFORMED a thread_deleted event cannot be imported: ' ..
      'it would mark the target deleted (' .. n .. ' events of this page copied); copy_thread ' ..
      'copies what a deleted source holds after it')
  end
  local nv = f.k == 'checkpoint' and checkpoint_shape(f)
  local why = nv and value_refs(KEYS[1], KEYS[3], f, nv)
  if why then
    local ok, source = pcall(cmsgpack.unpack, f.copy_of or '')
    local what = ok and type(source) == 'table' and
      ('event ' .. tostring(source[2]) .. ' of thread ' .. tostring(source[1])) or 'an event'
    expire_thread(KEYS[1], {KEYS[2], KEYS[3]}, ARGV[3])
    return redis.error_reply('STREAMSAVER_CORRUPT ' .. what .. ': ' .. why .. '; the copy ' ..
      'stops before it (' .. n .. ' events of this page copied); repair or remove it in the ' ..
      'source (`streamsaver verify` lists every such reference)')
  end
  local id
  -- the digest the event got is the chain's new head (see apply())
  id, f.dg = append_event(KEYS[1], ev)
  apply(KEYS[1], KEYS[2], KEYS[3], id, f)
  notify(KEYS[4], ARGV[1], id, f)
  i = i + count + 1
  n = n + 1
end
if deleted and redis.call('HEXISTS', KEYS[3], 'd') == 0 then
  reuse_deleted(KEYS[1], KEYS[2], KEYS[3])
end
expire_thread(KEYS[1], {KEYS[2], KEYS[3]}, ARGV[3])
return n
