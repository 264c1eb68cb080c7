-- get_delta_channel_history in one round trip (checkpoint/delta.lua's walk), or false when the
-- target checkpoint is not stored.
-- KEYS: log ix ptr   ARGV[1]: lp(ns)   ARGV[2]: checkpoint id, or '' for the latest of ns
-- ARGV[3..]: the channels
-- Returns the visited ancestors, nearest first, each {writes, seeds}:
--   writes  flat [task, idx, task path, channel, typed value, ...]: its pending writes to the
--           channels still walking there
--   seeds   flat [channel, version, head, parts, ...]: the values that end a channel's walk, in
--           checkpoint/read.lua's shape (parts newest first, ending with a whole value)
local p, cid = ARGV[1], ARGV[2]
if cid == '' then
  local m = redis.call('ZREVRANGEBYLEX', KEYS[2], '[c' .. p .. '\255', '[c' .. p, 'LIMIT', 0, 1)[1]
  if m == nil then
    return false
  end
  cid = string.sub(m, #p + 2)
end
local log, ptr, cache = KEYS[1], KEYS[3], {}
local eid, f = checkpoint_event(log, ptr, 'c' .. p .. cid, cache)
if eid == nil then
  return false
end
local channels = {}
for i = 3, #ARGV do
  channels[#channels + 1] = ARGV[i]
end
local out = {}
delta_walk(log, ptr, p, f.parent, channels, cache, function(_, a, walking, seeds)
  local writes = {}
  local l = pending_writes(ptr, p, a.id)
  for i = 1, #l, 4 do
    local wf = entry_fields(log, l[i + 2], cache)
    if wf == nil then
      corrupt('pending writes of checkpoint ' .. a.id .. ' point at missing event ' .. l[i + 2])
    end
    local pos = l[i + 3]
    local channel = cmsgpack.unpack(wf.wi)[pos * 2 + 1]
    if walking[channel] then
      writes[#writes + 1] = l[i]
      writes[#writes + 1] = tostring(l[i + 1])
      writes[#writes + 1] = wf.path
      writes[#writes + 1] = channel
      writes[#writes + 1] = wf['w' .. pos]
    end
  end
  local values = {}
  for _, s in ipairs(seeds) do
    local links, head = value_chain(log, ptr, p, s[1], s[2], cache)
    local parts = {}
    for j, link in ipairs(links) do
      parts[j] = link[3]
    end
    values[#values + 1] = s[1]
    values[#values + 1] = s[2]
    values[#values + 1] = head
    values[#values + 1] = parts
  end
  out[#out + 1] = {writes, values}
end)
return {out}
