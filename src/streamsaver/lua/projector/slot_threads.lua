-- The threads whose log exists, from slots' thread indexes (shared/common.lua's notify()): what
-- saver.thread_ids() and the readers without projections list, with no SCAN. Members whose log
-- expired stay until projector/sweep.lua forgets them; they are left out here.
-- KEYS: thread indexes (one on a cluster; every slot's on a standalone server, one call)
-- ARGV: [1] key prefix   [2] 'members' to return every member unchecked: on a cluster a slot in
-- migration may hold the index on one node and a log on the other, so the caller checks the
-- logs itself, each routed where it is
-- Returns, per index with live threads, {its position in KEYS, thread, ...}.
local out = {}
for i, key in ipairs(KEYS) do
  local alive = nil
  for _, t in ipairs(redis.call('SMEMBERS', key)) do
    local base = thread_base(ARGV[1], t)
    -- (or a deleted thread's mark, checkpoint/delete_thread.lua: thread_ids(deleted=True))
    if ARGV[2] == 'members' or redis.call('EXISTS', base .. 'log') == 1 or
        redis.call('HEXISTS', base .. 'ptr', 'd') == 1 then
      alive = alive or {i}
      alive[#alive + 1] = t
    end
  end
  if alive then
    out[#out + 1] = alive
  end
end
return out
