-- Read one checkpoint (checkpoint/read.lua's shape), or nil; an integrity error rather than partial state.
-- KEYS: log ix ptr   ARGV[1]: lp(ns)   ARGV[2]: checkpoint id, or '' for the latest of ns
-- ARGV[3]: '' or msgpack [channel, version, head, ...]: list values the client already holds
local p, cid = ARGV[1], ARGV[2]
local holds = nil
if ARGV[3] ~= nil and ARGV[3] ~= '' then
  holds = {}
  local flat = cmsgpack.unpack(ARGV[3])
  for i = 1, #flat, 3 do
    holds[flat[i]] = {flat[i + 1], flat[i + 2]}
  end
end
local listed = false
if cid == '' then
  local m = redis.call('ZREVRANGEBYLEX', KEYS[2], '[c' .. p .. '\255', '[c' .. p, 'LIMIT', 0, 1)[1]
  if m == nil then
    check_absent(KEYS[1], KEYS[2], KEYS[3], nil)
    return false
  end
  cid = string.sub(m, #p + 2)
  listed = true
end
local cache = {}
local eid, f = checkpoint_event(KEYS[1], KEYS[3], 'c' .. p .. cid, cache, listed)
if eid == nil then
  check_absent(KEYS[1], KEYS[2], KEYS[3], 'c' .. p .. cid)
  return false
end
return read_checkpoint(KEYS[1], KEYS[3], eid, f, cache, holds)
