-- (Re)build a slot's projections from its threads' logs, and set its cursor: what rebuild
-- --all and a projector's first start run. The caller read the feed's last id (ARGV[2])
-- before listing the slot's threads (ARGV[3..]), so a thread it missed is newer than that
-- id, and the projector applies it from the feed.
-- KEYS: feed state registry activity runs meta (registry.lua)   ARGV: [1] key prefix
-- Returns the number of threads with a row.
redis.call('DEL', KEYS[3], KEYS[4], KEYS[5], KEYS[6])
for i = 3, #ARGV do
  recompute(KEYS, ARGV[1], ARGV[i])
end
local now = redis.call('TIME')
redis.call('HSET', KEYS[2], 'cursor', ARGV[2], 'at', now[1] * 1000 + math.floor(now[2] / 1000),
           'meta_form', META_FORM)
return redis.call('HLEN', KEYS[3])
