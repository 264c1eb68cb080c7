-- delete_for_runs on one thread: the checkpoints of the given runs, their pending writes and
-- every value part only they stored leave the log. The thread is compacted (compact.lua) to
-- every other checkpoint, values they read from the deleted events included, and a "delete"
-- event naming what was deleted (no payloads) is appended last: the log records that, and when,
-- it happened. Appends nothing when the thread has none of the runs' checkpoints.
-- KEYS: log ix ptr feed   ARGV[1]: the feed's MAXLEN   ARGV[2]: 'chain' or '' (common.lua)
-- ARGV[3]: 'record' to append the "delete" event alone (it takes effect at once; the payloads
-- then leave the log with a sliced compaction, compact_slice.lua), '' to compact too, in this
-- call (what a server out of memory needs: compact.lua frees before it appends)
-- ARGV[4]: thread id   ARGV[5..]: run ids
-- With 'record', returns {checkpoints deleted, the delete event's id} when it deleted any.
-- Returns the number of checkpoints deleted. The thread keeps the time to live it had.
local items, runs = {}, {}
for i = 5, #ARGV do
  local r = 'r' .. lp(ARGV[i])
  local ms = redis.call('ZRANGEBYLEX', KEYS[2], '[' .. r, '[' .. r .. '\255')
  if #ms > 0 then
    runs[#runs + 1] = ARGV[i]
  end
  for _, m in ipairs(ms) do
    local ns, cid = split_lp(string.sub(m, #r + 1))
    items[#items + 1] = ns
    items[#items + 1] = cid
  end
end
if #items == 0 then
  return 0
end
-- A surviving checkpoint's DeltaChannels rebuild from its ancestors' writes back to their seed
-- (delta.lua): dropping such an ancestor would silently empty them. Refuse before writing
-- anything, naming the first: {'delta', ns, surviving id, its run, deleted id, its run}.
local deleted, cache, memo = {}, {}, {}
for i = 1, #items, 2 do
  deleted['c' .. lp(items[i]) .. items[i + 1]] = true
end
local live = redis.call('ZRANGEBYLEX', KEYS[2], '[c', '[c\255')
-- newest first, so older ones' walks stop where a newer one's went (delta.lua's memo)
for i = #live, 1, -1 do
  local m = live[i]
  if not deleted[m] then
    local _, f = checkpoint_event(KEYS[1], KEYS[3], m, cache)
    local needs = {}
    delta_ancestors(KEYS[1], KEYS[3], f, cache, needs, memo)
    for a in pairs(needs) do
      if deleted[a] then
        local _, af = checkpoint_event(KEYS[1], KEYS[3], a, cache)
        return {'delta', f.ns, f.id, f.run or '', af.id, af.run or ''}
      end
    end
  end
end
local ev = {'k', 'delete', 'sv', tostring(SCHEMA), 'thread', ARGV[4],
            'items', cmsgpack.pack(items), 'runs', cmsgpack.pack(runs)}
if ARGV[3] == 'record' then
  local id = append_event(KEYS[1], ev)
  local f = fields_of(ev)
  apply(KEYS[1], KEYS[2], KEYS[3], id, f)
  notify(KEYS[4], ARGV[1], id, f)
  expire_thread(KEYS[1], {KEYS[2], KEYS[3]}, 0)
  return {#items / 2, id}
end
-- projected first, so the compaction keeps every checkpoint but the deleted ones; it projects
-- the event again, with the rest, once appended
local f = fields_of(ev)
apply_delete(KEYS[1], KEYS[2], KEYS[3], '', f, check_delete(f))
compact(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], 0, {ev})
expire_thread(KEYS[1], {KEYS[2], KEYS[3]}, 0)
return #items / 2
