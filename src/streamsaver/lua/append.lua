-- Append one event to a thread's log and project it, atomically.
-- KEYS: log ix ptr feed (common.lua)
-- ARGV[1]: the feed's MAXLEN (0: no pointer)
-- ARGV[2]: '' or, for a checkpoint with append parts, a msgpack list of the heads
--          ("<event id> <field>") the client saw for each part's base, in nv order
-- ARGV[3..]: the event's fields, flat [field, value, ...]
-- Returns the new event id, or 'stale' (nothing written) when a base is not what the client
-- saw: the client then sends whole values instead.
local fields = {}
for i = 3, #ARGV do
  fields[i - 2] = ARGV[i]
end
local f = fields_of(fields)
if ARGV[2] ~= '' then
  local expected, j = cmsgpack.unpack(ARGV[2]), 1
  local nv, p = cmsgpack.unpack(f.nv), lp(f.ns)
  for i = 1, #nv, 3 do
    if nv[i + 2] ~= '' then
      local ref = redis.call('HGET', KEYS[3], 'b' .. p .. lp(nv[i]) .. nv[i + 2])
      local want = expected[j]
      if not ref or (ref ~= want and string.sub(ref, 1, #want + 1) ~= want .. ' ') then
        return 'stale'
      end
      j = j + 1
    end
  end
end
local id = redis.call('XADD', KEYS[1], '*', unpack(fields))
apply(KEYS[1], KEYS[2], KEYS[3], id, f)
notify(KEYS[4], ARGV[1], id, f)
return id
