-- Reading one checkpoint back: its event's header, the values of its channels (from whichever
-- events stored them) and its pending writes. Returned as {event id, header, values, writes}:
--   header  flat [field, value, ...] of the checkpoint event, without value fields
--   values  flat [channel, typed value, ...]
--   writes  flat [task, idx, task path, channel, typed value, ...]

local function blob_value(log, ptr, p, channel, version, cache)
  local ref = redis.call('HGET', ptr, 'b' .. p .. lp(channel) .. version)
  if not ref then
    return nil
  end
  local sp = string.find(ref, ' ', 1, true)
  local f = entry_fields(log, string.sub(ref, 1, sp - 1), cache)
  return f and f[string.sub(ref, sp + 1)]
end

local function read_checkpoint(log, ptr, eid, f, cache)
  local p = lp(f.ns)
  local header = {}
  for k, v in pairs(f) do
    if not string.match(k, '^b%d+$') then
      header[#header + 1] = k
      header[#header + 1] = v
    end
  end
  local values = {}
  local cv = cmsgpack.unpack(f.cv)
  for i = 1, #cv, 2 do
    local val = blob_value(log, ptr, p, cv[i], cv[i + 1], cache)
    if val then
      values[#values + 1] = cv[i]
      values[#values + 1] = val
    end
  end
  local writes = {}
  local wl = redis.call('HGET', ptr, 'w' .. p .. f.id)
  if wl then
    local l = cmsgpack.unpack(wl)
    for i = 1, #l, 4 do
      local wf = entry_fields(log, l[i + 2], cache)
      if wf then
        local pos = l[i + 3]
        local wi = cmsgpack.unpack(wf.wi)
        writes[#writes + 1] = l[i]
        writes[#writes + 1] = tostring(l[i + 1])
        writes[#writes + 1] = wf.path
        writes[#writes + 1] = wi[pos * 2 + 1]
        writes[#writes + 1] = wf['w' .. pos]
      end
    end
  end
  return {eid, header, values, writes}
end

local function checkpoint_event(log, ptr, member, cache)
  local eid = redis.call('HGET', ptr, member)
  if not eid then
    return nil, nil
  end
  local f = entry_fields(log, eid, cache)
  if f == nil then
    error({err = 'STREAMSAVER_CORRUPT index entry ' .. member .. ' points at missing event ' .. eid})
  end
  return eid, f
end
