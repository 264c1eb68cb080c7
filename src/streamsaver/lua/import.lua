-- Append a batch of events (copied from another thread) and project each.
-- KEYS: log ix ptr of the target   ARGV: per event, its field count, then its fields
-- Returns the number of events appended.
local i, n = 1, 0
while i <= #ARGV do
  local count = tonumber(ARGV[i])
  local ev = {}
  for j = 1, count do
    ev[j] = ARGV[i + j]
  end
  local id = redis.call('XADD', KEYS[1], '*', unpack(ev))
  apply(KEYS[1], KEYS[2], KEYS[3], id, fields_of(ev))
  i = i + count + 1
  n = n + 1
end
return n
