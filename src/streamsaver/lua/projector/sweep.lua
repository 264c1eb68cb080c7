-- Forget the threads of one slot that are gone: deleted (if the projector missed the feed
-- entry of their deletion) or expired. Readers already leave them out; this frees their rows,
-- index members and, once their log is gone, places in the slot's thread index.
-- KEYS: feed state registry activity runs meta (projector/registry.lua)   ARGV: [1] key prefix
-- Returns the number of threads forgotten.
local gone, seen = 0, {}
for _, t in ipairs(redis.call('HKEYS', KEYS[3])) do
  local base = thread_base(ARGV[1], t)
  if not live(base .. 'log', base .. 'ptr') then
    recompute(KEYS, ARGV[1], t)
    gone, seen[t] = gone + 1, true
  end
end
-- the slot's thread index (shared/common.lua) keeps expired threads too; a deleted thread's
-- mark keeps it there (checkpoint/delete_thread.lua: thread_ids(deleted=True) lists it)
local index = thread_index(KEYS[1])
for _, t in ipairs(redis.call('SMEMBERS', index)) do
  local base = thread_base(ARGV[1], t)
  if redis.call('EXISTS', base .. 'log') == 0 and
      redis.call('HEXISTS', base .. 'ptr', 'd') == 0 then
    redis.call('SREM', index, t)
    if not seen[t] then
      gone = gone + 1
    end
  end
end
return gone
