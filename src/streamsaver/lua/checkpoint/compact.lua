-- Compaction: rewrite a thread's log so it holds only what must survive, then trim the head.
-- Used by prune (keep the latest), by append (a saver's keep_last) and by delete_runs (drop the
-- deleted runs' payloads). Entries never leave the middle of a log: what survives is appended
-- again, in its original order, and everything older than the first copy is trimmed (in one
-- script, so no reader sees the log between), so the log stays an append-only sequence a
-- reader or an audit can follow.
--
-- What is appended again, each copy naming its source in 'origin':
--   1. every record, i.e. any projected event that is neither a checkpoint nor writes (today:
--      'delete' events; checkpoint/projection.lua indexes them in ix), as it was: what was deleted, and
--      when, outlives pruning. Events this version cannot project are not kept;
--   2. the kept checkpoints (the last `keep` of each namespace by checkpoint id, or all live
--      ones when keep is 0), oldest event first, each followed by its still-pending writes.
--      A copy carries the value fields its event stored, plus the parts of every value it
--      reads (or builds an append on) that no earlier copy provides: the oldest copy is
--      self-contained, and later ones store only what changed (principle 7); then the pending
--      writes of checkpoints not stored yet (see early_writes below);
--   3. `extra`: new events to append last, which may rely on any kept value (an append's new
--      checkpoint, a delete_runs 'delete' event).
-- Before the copies goes a 'pruned' tombstone (checkpoint/projection.lua's pruned_event()) recording what
-- is trimmed, so the trimmed log starts at it and its digest chain stays verifiable
-- (docs/audit.md).
-- Needs shared/common.lua, checkpoint/projection.lua and checkpoint/read.lua.

-- Stream ids "<ms>-<seq>" in log order.
local function id_less(a, b)
  local ams, aseq = string.match(a, '^(%d+)-(%d+)$')
  local bms, bseq = string.match(b, '^(%d+)-(%d+)$')
  ams, bms = tonumber(ams), tonumber(bms)
  if ams ~= bms then
    return ams < bms
  end
  return tonumber(aseq) < tonumber(bseq)
end

-- The copy of entry `eid`: its fields, less `skip_field` and those matching `skip_pattern`,
-- with 'origin' naming the first event of the copies' line (its id tells when it happened);
-- eid nil: a new event, not a copy.
local function copy_header(eid, f, skip_pattern, skip_field)
  local ev = {}
  for k, v in pairs(f) do
    if k ~= skip_field and k ~= 'origin' and k ~= 'ch' and k ~= 'dg'
        and not (skip_pattern and string.match(k, skip_pattern)) then
      ev[#ev + 1] = k
      ev[#ev + 1] = v
    end
  end
  if eid then
    ev[#ev + 1] = 'origin'
    ev[#ev + 1] = f.origin or eid
  end
  return ev
end

-- The members of the checkpoints to keep: the last `keep` of each namespace, or every one when
-- keep is 0; and the latest checkpoint id of each namespace. `new` is the member of a
-- checkpoint about to be appended: it is left out, and its namespace keeps one fewer, so that
-- with it the namespace holds `keep`. Members sort by (namespace, id), so each namespace's are
-- contiguous and its latest come last.
local function kept_members(ix, keep, new)
  local members = redis.call('ZRANGEBYLEX', ix, '[c', '[c\255')
  local new_ns = new and split_lp(string.sub(new, 2))
  local kept, latest, run, prev = {}, {}, {}, nil
  local function flush()
    local n = keep <= 0 and #run or (prev == new_ns and keep - 1 or keep)
    for i = math.max(1, #run - n + 1), #run do
      kept[#kept + 1] = run[i]
    end
  end
  for _, m in ipairs(members) do
    local ns, id = split_lp(string.sub(m, 2))
    if ns ~= prev then
      flush()
      run, prev = {}, ns
    end
    latest[ns] = id
    if m ~= new then
      run[#run + 1] = m
    end
  end
  flush()
  return kept, latest
end

-- Copies of the log's records (see 1. above), in log order.
local function records(log, ix, cache)
  local ids, out = {}, {}
  for _, m in ipairs(redis.call('ZRANGEBYLEX', ix, '[e', '[e\255')) do
    ids[#ids + 1] = string.sub(m, 2)
  end
  table.sort(ids, id_less)
  for _, id in ipairs(ids) do
    local f = entry_fields(log, id, cache)
    if f then
      out[#out + 1] = copy_header(id, f)
    end
  end
  return out
end

-- About the most a sliced compaction (checkpoint/compact_slice.lua) puts in one copy, as
-- FIELD_BYTES counts (checkpoint/projection.lua's entry_size()). A kept checkpoint's copy carries
-- every part of the values it reads that no earlier copy provides: the first one kept after a
-- prune, its whole conversation's chain (800 steps of 1 KB messages: ~700 parts, 850 KB, copied
-- in one unit of work, 20 ms). Reading those parts, hashing the copy for the chain and XADD cost
-- with its bytes and fields: past this, the parts are copied first, oldest first, in copies of
-- the same checkpoint each holding about this much (chain_copy()).
local COPY_BYTES = 32768

-- The parts checkpoint `f`'s copy needs that `provided` (per namespace, channel and version)
-- does not hold, from ptr alone, walking each value's chain down from the version named until
-- a provided link (what lies below it was copied with it). `at`: where a walk stopped before,
-- {need, version, depth}, or nil to start; stop(): asked after each link, true ends the walk
-- there. Returns the links, each {need, depth, channel, version, base, ref} (ref naming where
-- the part is, "<event id> <field>"), per need newest first, and where the walk stopped (nil at
-- its end).
local function walk_links(ptr, f, provided, at, stop)
  local p, nv, cv = lp(f.ns), cmsgpack.unpack(f.nv), cmsgpack.unpack(f.cv)
  local own, needs = {}, {}
  for i = 1, #nv, 3 do
    own[p .. lp(nv[i]) .. nv[i + 1]] = true
    if nv[i + 2] ~= '' then
      needs[#needs + 1] = {nv[i], nv[i + 2]}
    end
  end
  for i = 1, #cv, 2 do
    needs[#needs + 1] = {cv[i], cv[i + 1]}
  end
  local out, seen = {}, {}
  local n, v, depth = 1, needs[1] and needs[1][2], 0
  if at then
    n, v, depth = at[1], at[2], at[3]
  end
  while needs[n] do
    local channel = needs[n][1]
    while v ~= '' do
      local key = p .. lp(channel) .. v
      if own[key] or seen[key] or provided[key] then
        break
      end
      seen[key] = true
      local ref = redis.call('HGET', ptr, 'b' .. key)
      if not ref then
        if depth == 0 then
          break
        end
        corrupt('value of channel ' .. channel .. ' version ' .. v .. ' is missing below an append')
      end
      local eid, field, rest = string.match(ref, '^(%S+) (%S+)(.*)$')
      local base = string.sub(rest, 2)
      depth = depth + 1
      out[#out + 1] = {n, depth, channel, v, base, eid .. ' ' .. field}
      v = base
      if stop and stop() then
        return out, {n, v, depth}
      end
    end
    n, depth = n + 1, 0
    v = needs[n] and needs[n][2]
  end
  return out, nil
end

-- walk_links()'s links oldest first (each base before what appends to it), flat
-- {channel, version, base, ref, ...}.
local function oldest_first(links)
  table.sort(links, function(a, b)
    return a[1] < b[1] or (a[1] == b[1] and a[2] > b[2])
  end)
  local out = {}
  for _, l in ipairs(links) do
    out[#out + 1] = l[3]
    out[#out + 1] = l[4]
    out[#out + 1] = l[5]
    out[#out + 1] = l[6]
  end
  return out
end

-- The parts checkpoint `f`'s copy needs that `provided` does not hold, oldest first, flat
-- {channel, version, base, ref, ...}.
local function missing_links(ptr, f, provided)
  return oldest_first((walk_links(ptr, f, provided)))
end

-- The bytes of the part at `ref` ("<event id> <field>"), a shared part made plain.
local function link_part(log, channel, version, ref, cache)
  local eid, field = string.match(ref, '^(%S+) (%S+)$')
  return stored_part(log, channel, version, eid, field, cache)
end

-- The copy of checkpoint `f` (event `eid`): its header, then the parts of missing_links()
-- `links` up to position `to`, as value fields (parts: those read already, by position). With
-- own, its own value fields too, first.
local function copy_with(log, eid, f, cache, provided, links, to, own, parts)
  local p, nv = lp(f.ns), {}
  local ev = copy_header(eid, f, '^b%d+$', 'nv')
  if own then
    nv = cmsgpack.unpack(f.nv)
    for i = 1, #nv, 3 do
      ev[#ev + 1] = 'b' .. ((i - 1) / 3)
      -- a shared part names a write by an id the trim is about to remove: copy its bytes
      local part, why = plain_part(log, f['b' .. ((i - 1) / 3)], cache)
      if part == nil then
        corrupt('checkpoint ' .. f.id .. ' has ' .. why)
      end
      ev[#ev + 1] = part
      provided[p .. lp(nv[i]) .. nv[i + 1]] = true
    end
  end
  for i = 1, to, 4 do
    ev[#ev + 1] = 'b' .. (#nv / 3)
    ev[#ev + 1] = parts and parts[i] or link_part(log, links[i], links[i + 1], links[i + 3], cache)
    nv[#nv + 1] = links[i]
    nv[#nv + 1] = links[i + 1]
    nv[#nv + 1] = links[i + 2]
    provided[p .. lp(links[i]) .. links[i + 1]] = true
  end
  ev[#ev + 1] = 'nv'
  ev[#ev + 1] = cmsgpack.pack(nv)
  return ev
end

-- A checkpoint's copy: its own value fields, and the parts (from any event) of each value it
-- needs that `provided` (per namespace, channel and version) does not hold yet.
local function checkpoint_copy(log, ptr, eid, f, cache, provided)
  local links = missing_links(ptr, f, provided)
  return copy_with(log, eid, f, cache, provided, links, #links, true)
end

-- For a sliced compaction: nil when the parts `links` (as missing_links() gives them) that
-- checkpoint `f`'s copy (checkpoint_copy()) would add beside its own hold about COPY_BYTES or
-- less; else a copy of `f` holding only the oldest of them, about COPY_BYTES or those read
-- until stop() said so (at least one), which are then `provided`, and how many it holds (the
-- caller keeps those left for its next call: walking the chain again cost ~2 us a link).
-- Copied before it, as the log first stored them, those copies leave its own within the
-- bound: a copy of the same checkpoint again points the checkpoint at the newest (the last put
-- wins), and a value keeps its first pointer.
local function chain_copy(log, eid, f, cache, provided, links, stop)
  local bytes, parts = 0, {}
  for i = 1, #links, 4 do
    local part = link_part(log, links[i], links[i + 1], links[i + 3], cache)
    parts[i] = part
    bytes = bytes + #part + FIELD_BYTES
    if bytes > COPY_BYTES or stop() then
      return copy_with(log, eid, f, cache, provided, links, i, false, parts), (i + 3) / 4
    end
  end
  return nil, 0
end

-- Copies of the writes still pending for checkpoint `f`, one per source event, holding only
-- the writes the index still points at; with `upto`, only those of events up to that id (a
-- sliced compaction copies later ones as they come, checkpoint/compact_slice.lua).
local function writes_copies(log, ptr, f, cache, out, upto)
  local l, by_src, order = pending_writes(ptr, lp(f.ns), f.id), {}, {}
  for j = 1, #l, 4 do
    local src = l[j + 2]
    if upto and id_less(upto, src) then
      src = nil
    elseif by_src[src] == nil then
      by_src[src] = {}
      order[#order + 1] = src
    end
    if src then
      table.insert(by_src[src], l[j + 3])
    end
  end
  for _, src in ipairs(order) do
    local wf = entry_fields(log, src, cache)
    local wi, nwi = cmsgpack.unpack(wf.wi), {}
    local wev = copy_header(src, wf, '^w%d+$', 'wi')
    for j, pos in ipairs(by_src[src]) do
      nwi[#nwi + 1] = wi[pos * 2 + 1]
      nwi[#nwi + 1] = wi[pos * 2 + 2]
      wev[#wev + 1] = 'w' .. (j - 1)
      wev[#wev + 1] = wf['w' .. pos]
    end
    wev[#wev + 1] = 'wi'
    wev[#wev + 1] = cmsgpack.pack(nwi)
    out[#out + 1] = wev
  end
end

-- Writes may arrive before their checkpoint (LangGraph sends a step's writes concurrently with
-- its checkpoint): the pending writes of a checkpoint not stored yet, newer than the latest of
-- its namespace, are copied too, as are those of `new`, the checkpoint being appended.
local function early_writes(log, ix, ptr, kept, latest, new, cache, out)
  for _, name in ipairs(redis.call('HKEYS', ptr)) do
    local m = 'c' .. string.sub(name, 2)
    if string.sub(name, 1, 1) == 'w' and not kept[m] then
      local ns, id = split_lp(string.sub(name, 2))
      if m == new or (not redis.call('ZSCORE', ix, m) and (latest[ns] or '') < id) then
        writes_copies(log, ptr, {ns = ns, id = id}, cache, out)
      end
    end
  end
end

-- A put compacts when its namespace holds 2 x keep checkpoints, so a compaction, costing what
-- it keeps, comes once per keep puts. Ancestors kept for DeltaChannels (checkpoint/delta.lua) can
-- outnumber keep, and the namespace would then compact on every put. While a compaction would drop
-- fewer checkpoints than it keeps, the put's events are appended as they are instead, so the cost
-- stays spread over as many puts as a compaction copies. Returns their ids, or nil to compact.
local function deferred(log, ix, ptr, feed, maxlen, kept, extra)
  local live = redis.call('ZLEXCOUNT', ix, '[c', '[c\255')
  if live - kept >= kept then
    return nil
  end
  local ids = {}
  for _, ev in ipairs(extra) do
    local id = append_event(log, ev)
    -- append_event added the digests to ev: apply() projects dg as a plain append does
    local f = fields_of(ev)
    apply(log, ix, ptr, id, f)
    notify(feed, maxlen, id, f)
    ids[#ids + 1] = id
  end
  return ids
end

-- Compact the thread (see the top of this file). keep: checkpoints kept per namespace, 0 for
-- every live one. extra: events to append last (flat field lists; a checkpoint among them is
-- completed with the parts it needs and counts among its namespace's `keep`). Returns the
-- number of entries trimmed and the ids the extra events got, in order.
local function compact(log, ix, ptr, feed, maxlen, keep, extra)
  local cache, provided = {}, {}
  local kept, new = {}, nil
  for _, ev in ipairs(extra or {}) do
    local f = fields_of(ev)
    if f.k == 'checkpoint' then
      new = 'c' .. lp(f.ns) .. f.id
    end
  end
  local members, latest = kept_members(ix, keep, new)
  if keep > 0 then
    -- keep 0 keeps every live checkpoint: delete_runs checked that none it keeps needs one it
    -- drops (checkpoint/delta.lua)
    local n = #members
    members = with_delta_ancestors(log, ptr, members, extra, cache)
    local ids = new and #members > n and deferred(log, ix, ptr, feed, maxlen, #members, extra)
    if ids then
      return 0, ids
    end
  end
  local is_kept = {}
  for _, m in ipairs(members) do
    local eid, f = checkpoint_event(log, ptr, m, cache, true)
    kept[#kept + 1] = {eid, f}
    is_kept[m] = true
  end
  table.sort(kept, function(a, b) return id_less(a[1], b[1]) end)

  local events = records(log, ix, cache)
  for _, c in ipairs(kept) do
    events[#events + 1] = checkpoint_copy(log, ptr, c[1], c[2], cache, provided)
    writes_copies(log, ptr, c[2], cache, events)
  end
  early_writes(log, ix, ptr, is_kept, latest, new, cache, events)
  local first_extra = #events + 1
  for _, ev in ipairs(extra or {}) do
    local f = fields_of(ev)
    if f.k == 'checkpoint' then
      ev = checkpoint_copy(log, ptr, nil, f, cache, provided)
    end
    events[#events + 1] = ev
  end

  if #events == 0 then
    local n = redis.call('XLEN', log)
    redis.call('DEL', log, ix, ptr)
    return n, {}
  end
  table.insert(events, 1, pruned_event(log))
  first_extra = first_extra + 1
  -- Everything the copies need is read: the old entries go first (the stream keeps its last
  -- id, so the copies still sort after them, and the chain goes on from the head read here).
  -- On a server out of memory Redis refuses a script whose first write may grow memory
  -- (XADD), not one that starts by freeing it: a compaction frees memory, so it must work then.
  heads[log] = chain_head(log)
  local removed = redis.call('XTRIM', log, 'MAXLEN', 0)
  local ids = {}
  for i, ev in ipairs(events) do
    ids[i] = append_event(log, ev)
  end
  redis.call('DEL', ix, ptr)
  for i, ev in ipairs(events) do
    local f = fields_of(ev)
    apply(log, ix, ptr, ids[i], f)
    notify(feed, maxlen, ids[i], f)
  end
  local extra_ids = {}
  for i = first_extra, #events do
    extra_ids[#extra_ids + 1] = ids[i]
  end
  return removed, extra_ids
end
