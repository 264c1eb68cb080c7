-- Forget the threads of one slot that are gone: deleted (if the projector missed the feed
-- entry of their deletion) or expired. Readers already leave them out; this frees their rows
-- and index members.
-- KEYS: feed state registry activity runs meta (registry.lua)   ARGV: [1] key prefix
-- Returns the number of threads forgotten.
local gone = 0
for _, t in ipairs(redis.call('HKEYS', KEYS[3])) do
  local base = thread_base(ARGV[1], t)
  if not live(base .. 'log', base .. 'ptr') then
    recompute(KEYS, ARGV[1], t)
    gone = gone + 1
  end
end
return gone
