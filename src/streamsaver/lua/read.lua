-- Reading one checkpoint back: its event's header, the values of its channels (from whichever
-- events stored them) and its pending writes. Returned as {event id, header, values, writes}:
--   header  flat [field, value, ...] of the checkpoint event, without value fields
--   values  flat [channel, version, head, parts, extends, ...]: head is "<event id> <field>" of
--           the newest part; parts, newest first, end with a whole value (see _delta.py), unless
--           extends is '1': then they end where the value the client said it holds begins
--   writes  flat [task, idx, task path, channel, typed value, ...]

local function corrupt(what)
  error({err = 'STREAMSAVER_CORRUPT ' .. what})
end

-- The links of (channel, version): {{version, base, part}, ...} from the newest part down to
-- the whole value it extends, and the head reference; nil when nothing is stored. With `held`
-- ({version, head} of a value the client holds), the walk stops above that value if its
-- pointer still names that head, and the third result is true.
local function value_chain(log, ptr, p, channel, version, cache, held)
  local links, head, v = {}, nil, version
  while true do
    local ref = redis.call('HGET', ptr, 'b' .. p .. lp(channel) .. v)
    if held and ref and v == held[1] and (ref == held[2] or
        string.sub(ref, 1, #held[2] + 1) == held[2] .. ' ') then
      return links, head or held[2], true
    end
    if not ref then
      if head == nil then
        return nil
      end
      corrupt('value of channel ' .. channel .. ' version ' .. v .. ' is missing below an append')
    end
    local s1 = string.find(ref, ' ', 1, true)
    local s2 = string.find(ref, ' ', s1 + 1, true)
    local eid = string.sub(ref, 1, s1 - 1)
    local field = string.sub(ref, s1 + 1, (s2 or 0) - 1)
    local f = entry_fields(log, eid, cache)
    if f == nil or f[field] == nil then
      corrupt('value of channel ' .. channel .. ' points at missing event ' .. eid)
    end
    head = head or (eid .. ' ' .. field)
    local base = s2 and string.sub(ref, s2 + 1) or ''
    local part, why = plain_part(log, f[field], cache)
    if part == nil then
      corrupt('value of channel ' .. channel .. ' version ' .. v .. ' is ' .. why)
    end
    links[#links + 1] = {v, base, part}
    if base == '' then
      return links, head
    end
    v = base
  end
end

-- A stored field decoded, or a typed error naming the event: a projected entry edited since
-- would otherwise fail inside cmsgpack, an untyped script error.
local function decoded(eid, f, name)
  local ok, v = pcall(cmsgpack.unpack, f[name])
  if not ok or type(v) ~= 'table' then
    corrupt('event ' .. eid .. ' has a ' .. name .. ' field that cannot be decoded: it was ' ..
      'altered after it was projected (`streamsaver audit verify` names the edit)')
  end
  return v
end

local function read_checkpoint(log, ptr, eid, f, cache, holds)
  if type(f.ns) ~= 'string' or type(f.id) ~= 'string' or type(f.cp) ~= 'string' then
    corrupt('event ' .. eid .. ' lacks its ns, id or cp field: it was altered after it was ' ..
      'projected (`streamsaver audit verify` names the edit)')
  end
  local p = lp(f.ns)
  local header = {}
  for k, v in pairs(f) do
    if not string.match(k, '^b%d+$') then
      header[#header + 1] = k
      header[#header + 1] = v
    end
  end
  local values = {}
  local cv = decoded(eid, f, 'cv')
  for i = 1, #cv, 2 do
    local held = holds and holds[cv[i]]
    local links, head, extends = value_chain(log, ptr, p, cv[i], cv[i + 1], cache, held)
    if links then
      local parts = {}
      for j, link in ipairs(links) do
        parts[j] = link[3]
      end
      values[#values + 1] = cv[i]
      values[#values + 1] = cv[i + 1]
      values[#values + 1] = head
      values[#values + 1] = parts
      values[#values + 1] = extends and '1' or ''
    end
  end
  local writes = {}
  local wl = redis.call('HGET', ptr, 'w' .. p .. f.id)
  if wl then
    local l = cmsgpack.unpack(wl)
    for i = 1, #l, 4 do
      local wf = entry_fields(log, l[i + 2], cache)
      -- a checkpoint without some of its pending writes would resume as if they never ran
      if wf == nil then
        corrupt('pending writes of checkpoint ' .. f.id .. ' point at missing event ' .. l[i + 2])
      end
      local pos = l[i + 3]
      local wi = decoded(l[i + 2], wf, 'wi')
      writes[#writes + 1] = l[i]
      writes[#writes + 1] = tostring(l[i + 1])
      writes[#writes + 1] = wf.path
      writes[#writes + 1] = wi[pos * 2 + 1]
      writes[#writes + 1] = wf['w' .. pos]
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
    corrupt('index entry ' .. member .. ' points at missing event ' .. eid)
  end
  return eid, f
end
