-- prune(strategy="keep_latest") on one thread: compact it to the latest checkpoint of each
-- namespace (checkpoint/compact.lua). The thread keeps the time to live it had.
-- KEYS: log ix ptr feed   ARGV[1]: the feed's MAXLEN   ARGV[2]: 'chain' or '' (shared/common.lua)
-- ARGV[3]: checkpoints kept per namespace
-- Returns the number of log entries removed.
local removed = compact(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], tonumber(ARGV[3]), {})
expire_thread(KEYS[1], {KEYS[2], KEYS[3]}, 0)
return removed
