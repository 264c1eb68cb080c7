-- Forget the threads of one slot whose log is gone: deleted (delete_thread leaves no feed
-- entry) or expired. Readers already leave them out; this frees their rows and index members.
-- KEYS: feed state registry activity runs meta (registry.lua)   ARGV: [1] key prefix
-- Returns the number of threads forgotten.
local gone = 0
for _, t in ipairs(redis.call('HKEYS', KEYS[3])) do
  if redis.call('EXISTS', thread_base(ARGV[1], t) .. 'log') == 0 then
    recompute(KEYS, ARGV[1], t)
    gone = gone + 1
  end
end
return gone
