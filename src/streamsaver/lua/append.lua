-- Append one event to a thread's log and project it, atomically.
-- KEYS: log ix ptr (common.lua)   ARGV: the event's fields, flat [field, value, ...]
local id = redis.call('XADD', KEYS[1], '*', unpack(ARGV))
apply(KEYS[1], KEYS[2], KEYS[3], id, fields_of(ARGV))
return id
