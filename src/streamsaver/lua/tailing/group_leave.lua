-- A consumer leaves a group on one feed: it is deleted when it has no pending entries; with
-- some, it stays, so the group's other members can claim them after their idle time (and reap
-- it once they have). Atomic, so no entry can become pending between the check and the delete.
-- KEYS: feed   ARGV: group, consumer
-- Returns 1 (deleted), 0 (kept: it has pending entries) or -1 (no such group or feed).
local rows = redis.pcall('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if type(rows) == 'table' and rows.err then
  return -1
end
if #rows > 0 then
  return 0
end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
return 1
