-- Append a batch of events (copied from another thread) and project each.
-- KEYS: log ix ptr feed of the target   ARGV[1]: the feed's MAXLEN   ARGV[2]: 'chain' or ''
-- ARGV[3]: the target's time to live in ms, restarted by this write (0: none)
-- ARGV[4..]: per event, its field count, then its fields (without the source's ch and dg: the
-- copies are chained anew in the target)
-- Returns the number of events appended.
-- a copy into a deleted thread's id is a thread of its own (projection.lua's reuse_deleted())
local deleted = redis.call('HEXISTS', KEYS[3], 'd') == 1
local i, n = 4, 0
while i <= #ARGV do
  local count = tonumber(ARGV[i])
  local ev = {}
  for j = 1, count do
    ev[j] = ARGV[i + j]
  end
  local id = append_event(KEYS[1], ev)
  local f = fields_of(ev)
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
