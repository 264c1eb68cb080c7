-- Reading one checkpoint back: its event's header, the values of its channels (from whichever
-- events stored them) and its pending writes. Returned as {event id, header, values, writes}:
--   header  flat [field, value, ...] of the checkpoint event, without value fields
--   values  flat [channel, version, head, parts, extends, ...]: head is "<event id> <field>" of
--           the newest part; parts, newest first, end with a whole value (see core/delta.py), unless
--           extends is '1': then they end where the value the client said it holds begins
--   writes  flat [task, idx, task path, channel, typed value, ...]

local function corrupt(what)
  error({err = 'STREAMSAVER_CORRUPT ' .. what})
end

-- An index points at an event the log does not hold: the data is gone, and replaying the log
-- (a rebuild) cannot bring it back.
local function lost(log, what)
  if redis.call('EXISTS', log) == 0 then
    what = what .. ', and the thread\'s whole log is gone'
  end
  error({err = integrity('LOST', {log, what})})
end

local function describe(ns, id)
  return 'checkpoint ' .. id .. ' (namespace "' .. ns .. '")'
end

-- The bytes of the part in field `field` of event `eid` that (channel, version) points at, a
-- shared part made plain; a typed error when the event, the field or the part is not there.
local function stored_part(log, channel, version, eid, field, cache)
  local f = entry_fields(log, eid, cache)
  if f == nil then
    lost(log, 'the value of channel ' .. channel .. ' points at event ' .. eid ..
      ', which is missing from the log')
  elseif f[field] == nil then
    corrupt('value of channel ' .. channel .. ' points at missing event ' .. eid)
  end
  local part, why = plain_part(log, f[field], cache)
  if part == nil then
    corrupt('value of channel ' .. channel .. ' version ' .. version .. ' is ' .. why)
  end
  return part
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
    local part = stored_part(log, channel, v, eid, field, cache)
    head = head or (eid .. ' ' .. field)
    local base = s2 and string.sub(ref, s2 + 1) or ''
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
    if links == nil then
      -- an empty channel is stored too (an explicit marker), so nothing stored means lost:
      -- the checkpoint without it would be state that never existed
      error({err = integrity('MISSING', {log, f.ns, f.id, cv[i], cv[i + 1]})})
    else
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
  local l = pending_writes(ptr, p, f.id)
  for i = 1, #l, 4 do
    local wf = entry_fields(log, l[i + 2], cache)
    -- a checkpoint without some of its pending writes would resume as if they never ran
    if wf == nil then
      lost(log, 'a pending write of task ' .. l[i] .. ' to ' .. describe(f.ns, f.id) ..
        ' points at event ' .. l[i + 2] .. ', which is missing from the log')
    end
    local pos = l[i + 3]
    local wi = decoded(l[i + 2], wf, 'wi')
    writes[#writes + 1] = l[i]
    writes[#writes + 1] = tostring(l[i + 1])
    writes[#writes + 1] = wf.path
    writes[#writes + 1] = wi[pos * 2 + 1]
    writes[#writes + 1] = wf['w' .. pos]
  end
  return {eid, header, values, writes}
end

-- The checkpoint whose ix member is `member`: its event id and fields, or nil when the thread
-- has no such checkpoint. `listed`: ix holds the member, so the pointer must exist.
local function checkpoint_event(log, ptr, member, cache, listed)
  local eid = redis.call('HGET', ptr, member)
  if not eid and not listed then
    return nil, nil
  end
  local f = eid and entry_fields(log, eid, cache)
  if f then
    return eid, f
  end
  local what = describe(split_lp(string.sub(member, 2)))
  if eid then
    lost(log, what .. ' points at event ' .. eid .. ', which is missing from the log')
  elseif redis.call('EXISTS', ptr) == 1 then
    -- ptr was lost and re-created by later writes: the log may still hold the event
    corrupt('index entry for ' .. what .. ' has no pointer')
  elseif redis.call('EXISTS', log) == 1 then
    error({err = integrity('NOINDEX', {log})})
  end
  lost(log, what .. ' is indexed but its pointers are gone')
end

-- Whether a thread without ix had a checkpoint: a ptr field naming one (HSCAN: without ix nothing
-- lists them), or else a checkpoint event in the log (newest first, where they are found at
-- once; only a thread that never had one, e.g. one with writes only, is read to its start). A
-- checkpoint always leaves an ix member, and deleting it leaves a record there, so either means ix
-- was lost. Runs only on the not-found path of such a thread.
local function had_checkpoint(log, ptr, has_ptr)
  local cursor = has_ptr and '0' or nil
  while cursor do
    local r = redis.call('HSCAN', ptr, cursor, 'MATCH', 'c*', 'COUNT', 1000)
    if #r[2] > 0 then
      return true
    end
    cursor = r[1] ~= '0' and r[1] or nil
  end
  local hi = '+'
  while true do
    local batch = redis.call('XREVRANGE', log, hi, '-', 'COUNT', 50)
    for _, e in ipairs(batch) do
      if fields_of(e[2]).k == 'checkpoint' then
        return true
      end
    end
    if #batch < 50 then
      return false
    end
    hi = '(' .. batch[#batch][1]
  end
end

-- A read found no checkpoint. A thread that has no key (never written, deleted, expired whole)
-- reads as nothing; one that lost some of its keys (an eviction) raises: it must never read as
-- nothing, or as less than it holds. member: the ix member looked up by id, if any. A few
-- EXISTS, on this path only.
local function check_absent(log, ix, ptr, member)
  local has_log = redis.call('EXISTS', log) == 1
  local has_ix = redis.call('EXISTS', ix) == 1
  local has_ptr = redis.call('EXISTS', ptr) == 1
  if not has_log then
    -- a deleted thread's mark is all a deletion leaves (checkpoint/delete_thread.lua)
    if has_ix or (has_ptr and redis.call('HEXISTS', ptr, 'd') == 0) then
      error({err = integrity('LOST', {log, 'its indexes remain but its log is gone'})})
    end
    return
  end
  if member and redis.call('ZSCORE', ix, member) then
    checkpoint_event(log, ptr, member, {}, true)
  end
  local lost_ix = not has_ix and had_checkpoint(log, ptr, has_ptr)
  -- ix listing a checkpoint needs ptr, which every checkpoint writes
  local lost_ptr = has_ix and not has_ptr and
    #redis.call('ZRANGEBYLEX', ix, '[c', '[c\255', 'LIMIT', 0, 1) > 0
  if lost_ix or lost_ptr then
    error({err = integrity('NOINDEX', {log})})
  end
end
