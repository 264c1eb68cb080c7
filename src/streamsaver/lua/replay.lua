-- Rebuild a thread's indexes by replaying its whole log through apply().
-- KEYS: log ix ptr (ix and ptr may be scratch keys of the same slot, to compare with live ones)
-- Returns {events applied, events skipped (unknown kind or newer schema)}.
redis.call('DEL', KEYS[2], KEYS[3])
local applied, skipped, start = 0, 0, '-'
while true do
  local batch = redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', 1000)
  if #batch == 0 then
    return {applied, skipped}
  end
  for _, e in ipairs(batch) do
    if apply(KEYS[1], KEYS[2], KEYS[3], e[1], fields_of(e[2])) then
      applied = applied + 1
    else
      skipped = skipped + 1
    end
  end
  start = '(' .. batch[#batch][1]
end
