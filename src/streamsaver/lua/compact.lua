-- prune(strategy="keep_latest") on one thread. The latest checkpoint of every namespace is
-- re-appended as a self-contained event (every channel value it reads, not only the ones that
-- changed, with the parts append values are made of), followed by its still-pending writes; then everything older is trimmed and the
-- indexes are re-projected from what is left, so a replay of the log gives the same reads.
-- The first event appended is a 'pruned' tombstone recording what is trimmed, so the trimmed
-- log starts at it and its digest chain stays verifiable (docs/audit.md).
-- KEYS: log ix ptr feed   ARGV[1]: the feed's MAXLEN   ARGV[2]: 'chain' or '' (common.lua)
-- Returns the number of log entries removed.
local log, ix, ptr = KEYS[1], KEYS[2], KEYS[3]
local members = redis.call('ZRANGEBYLEX', ix, '[c', '[c\255')
if #members == 0 then
  local n = redis.call('XLEN', log)
  redis.call('DEL', log, ix, ptr)
  return n
end

local function ns_of(m)
  local ns = split_lp(string.sub(m, 2))
  return ns
end

local cache, events = {}, {}
-- the event's own fields, less its values, the list describing them and an older 'origin'
local function copy_header(f, skip_pattern, skip_field)
  local ev = {}
  for k, v in pairs(f) do
    if k ~= skip_field and k ~= 'origin' and k ~= 'ch' and k ~= 'dg'
        and not string.match(k, skip_pattern) then
      ev[#ev + 1] = k
      ev[#ev + 1] = v
    end
  end
  return ev
end

for i, m in ipairs(members) do
  -- members sort by (namespace, id): the last of each namespace is its latest
  if members[i + 1] == nil or ns_of(members[i + 1]) ~= ns_of(m) then
    local eid, f = checkpoint_event(log, ptr, m, cache)
    local p = lp(f.ns)
    local ev = copy_header(f, '^b%d+$', 'nv')
    -- every part of every value the checkpoint reads, with its links, so the trimmed log is
    -- self-contained
    local cv, nv = cmsgpack.unpack(f.cv), {}
    for j = 1, #cv, 2 do
      local links = value_chain(log, ptr, p, cv[j], cv[j + 1], cache) or {}
      for _, link in ipairs(links) do
        ev[#ev + 1] = 'b' .. (#nv / 3)
        ev[#ev + 1] = link[3]
        nv[#nv + 1] = cv[j]
        nv[#nv + 1] = link[1]
        nv[#nv + 1] = link[2]
      end
    end
    ev[#ev + 1] = 'nv'
    ev[#ev + 1] = cmsgpack.pack(nv)
    ev[#ev + 1] = 'origin'
    ev[#ev + 1] = eid
    events[#events + 1] = ev

    local wl = redis.call('HGET', ptr, 'w' .. p .. f.id)
    if wl then
      local l, by_src, order = cmsgpack.unpack(wl), {}, {}
      for j = 1, #l, 4 do
        local src = l[j + 2]
        if by_src[src] == nil then
          by_src[src] = {}
          order[#order + 1] = src
        end
        table.insert(by_src[src], l[j + 3])
      end
      for _, src in ipairs(order) do
        local wf = entry_fields(log, src, cache)
        local wi, nwi = cmsgpack.unpack(wf.wi), {}
        local wev = copy_header(wf, '^w%d+$', 'wi')
        for j, pos in ipairs(by_src[src]) do
          nwi[#nwi + 1] = wi[pos * 2 + 1]
          nwi[#nwi + 1] = wi[pos * 2 + 2]
          wev[#wev + 1] = 'w' .. (j - 1)
          wev[#wev + 1] = wf['w' .. pos]
        end
        wev[#wev + 1] = 'wi'
        wev[#wev + 1] = cmsgpack.pack(nwi)
        wev[#wev + 1] = 'origin'
        wev[#wev + 1] = src
        events[#events + 1] = wev
      end
    end
  end
end

table.insert(events, 1, pruned_event(log))
local ids = {}
for i, ev in ipairs(events) do
  ids[i] = append_event(log, ev)
end
local removed = redis.call('XTRIM', log, 'MINID', ids[1])
redis.call('DEL', ix, ptr)
for i, ev in ipairs(events) do
  local f = fields_of(ev)
  apply(log, ix, ptr, ids[i], f)
  notify(KEYS[4], ARGV[1], ids[i], f)
end
return removed
