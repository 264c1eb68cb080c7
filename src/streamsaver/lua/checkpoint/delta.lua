-- DeltaChannel history: LangGraph's DeltaChannel stores no value at most checkpoints and rebuilds
-- itself from the writes of the checkpoint's ancestors, back to the nearest one that stores a
-- value for the channel (its seed, usually a _DeltaSnapshot). BaseCheckpointSaver's
-- get_delta_channel_history defines the walk: from the target's parent up the parent chain,
-- each ancestor contributes its pending writes to the channels still walking, and a channel
-- stops at the first ancestor whose channel_values holds it (that ancestor's writes included).
-- The same walk serves reads (checkpoint/delta_history.lua) and retention (checkpoint/compact.lua
-- keeps, and checkpoint/delete_runs.lua refuses to drop, what a kept checkpoint's walk still
-- needs).
-- Needs shared/common.lua and checkpoint/read.lua.

-- A value stored as ormsgpack.packb(("empty", b"")) is a channel in channel_versions without a
-- value (see core/fields.py): get_tuple leaves it out of channel_values, so it is no seed.
local EMPTY = '\146\165empty\196\0'

-- The version of `channel` at checkpoint `f` if get_tuple would put it in channel_values.
local function seed_version(log, ptr, p, versions, channel, cache)
  local version = versions[channel]
  if version == nil then
    return nil
  end
  local ref = redis.call('HGET', ptr, 'b' .. p .. lp(channel) .. version)
  if not ref then
    return nil
  end
  local eid, field, base = string.match(ref, '^(%S+) (%S+)(.*)$')
  if base ~= '' then
    -- an append part: a list, never empty
    return version
  end
  local f = entry_fields(log, eid, cache)
  if f == nil or f[field] == nil then
    corrupt('value of channel ' .. channel .. ' points at missing event ' .. eid)
  end
  if f[field] == EMPTY then
    return nil
  end
  return version
end

-- Walk the ancestors of a checkpoint whose parent is `parent` (in namespace lp `p`) for
-- `channels` (a list, duplicates allowed). For each ancestor, nearest first, calls
-- visit(eid, f, walking, seeds): walking is the set of channels still walking there (before
-- its seeds end theirs), seeds a list of {channel, version} of the channels it seeds. Stops
-- when every channel has its seed, at the root, or at a parent that is not stored (as the
-- default walk, whose get_tuple finds nothing there). `memo` (optional, shared by several
-- walks): by checkpoint, the channels an earlier walk went on with from there; a walk that
-- reaches one with no other channel stops, as what lies beyond was visited already.
local function delta_walk(log, ptr, p, parent, channels, cache, visit, memo)
  local walking, left = {}, 0
  for _, ch in ipairs(channels) do
    if not walking[ch] then
      walking[ch] = true
      left = left + 1
    end
  end
  local seen = {}
  while parent ~= nil and parent ~= '' and left > 0 do
    if seen[parent] then
      corrupt('checkpoint ' .. parent .. ' is its own ancestor')
    end
    seen[parent] = true
    if memo then
      local key, before, new = p .. parent, nil, false
      before = memo[key] or {}
      for ch in pairs(walking) do
        if not before[ch] then
          before[ch] = true
          new = true
        end
      end
      if not new then
        return
      end
      memo[key] = before
    end
    local eid, f = checkpoint_event(log, ptr, 'c' .. p .. parent, cache)
    if eid == nil then
      return
    end
    local cv, versions = cmsgpack.unpack(f.cv), {}
    for i = 1, #cv, 2 do
      versions[cv[i]] = cv[i + 1]
    end
    local seeds = {}
    for ch in pairs(walking) do
      local version = seed_version(log, ptr, p, versions, ch, cache)
      if version then
        seeds[#seeds + 1] = {ch, version}
      end
    end
    visit(eid, f, walking, seeds)
    for _, s in ipairs(seeds) do
      walking[s[1]] = nil
      left = left - 1
    end
    parent = f.parent
  end
end

-- The DeltaChannels a checkpoint reads from its ancestors: LangGraph names them in its
-- metadata's counters_since_delta_snapshot (only channels with updates or supersteps since
-- their last snapshot, i.e. the ones that store no value at this checkpoint).
local function delta_channels(f)
  if f.meta == nil then
    return {}
  end
  local ok, meta = pcall(cmsgpack.unpack, f.meta)
  local counters = ok and type(meta) == 'table' and meta.counters_since_delta_snapshot
  local out = {}
  if type(counters) == 'table' then
    for ch in pairs(counters) do
      if type(ch) == 'string' then
        out[#out + 1] = ch
      end
    end
  end
  return out
end

-- The checkpoints the DeltaChannel walk of checkpoint `f` visits, as ix members
-- ('c' .. lp(ns) .. id), added to the set `into`. Each visited ancestor, with its pending
-- writes, is needed to rebuild the channels at `f`.
local function delta_ancestors(log, ptr, f, cache, into, memo)
  local channels = delta_channels(f)
  if #channels == 0 then
    return
  end
  local p = lp(f.ns)
  delta_walk(log, ptr, p, f.parent, channels, cache, function(_, a)
    into['c' .. p .. a.id] = true
  end, memo)
end

-- Compaction (checkpoint/compact.lua) keeps `members`, and appends the checkpoints among `extra`: a
-- kept checkpoint that is not a DeltaChannel seed still reads its ancestors' writes, so those
-- ancestors (and their pending writes) are kept too, back to each channel's seed. This is the
-- first of the remedies BaseCheckpointSaver.prune documents; the others need the channels'
-- reducers, which only LangGraph has. Returns members with the ancestors added.
local function with_delta_ancestors(log, ptr, members, extra, cache)
  local kept, needed, memo = {}, {}, {}
  -- newest first (the new checkpoint, then members from the latest): an older member's walk
  -- mostly stops at once, on ancestors a newer one's walk went through
  for _, ev in ipairs(extra or {}) do
    local f = fields_of(ev)
    if f.k == 'checkpoint' then
      delta_ancestors(log, ptr, f, cache, needed, memo)
    end
  end
  for i = #members, 1, -1 do
    local m = members[i]
    kept[m] = true
    local _, f = checkpoint_event(log, ptr, m, cache)
    if f then
      delta_ancestors(log, ptr, f, cache, needed, memo)
    end
  end
  for m in pairs(needed) do
    if not kept[m] then
      kept[m] = true
      members[#members + 1] = m
    end
  end
  return members
end

-- delete_for_runs (checkpoint/delete_runs.lua, checkpoint/compact_slice.lua) drops the checkpoints
-- of the runs in `named` (a set): refused when checkpoint `m` (an ix member), of another run,
-- rebuilds its DeltaChannels from one of them. Returns nil, or {'delta', ns, m's id, its run, the
-- dropped ancestor's id, its run}. memo: shared by the calls of one check (delta_walk()).
local function run_dependency(log, ptr, m, named, cache, memo)
  local _, f = checkpoint_event(log, ptr, m, cache)
  if not f or named[f.run or ''] then
    return nil
  end
  local needs = {}
  delta_ancestors(log, ptr, f, cache, needs, memo)
  for a in pairs(needs) do
    local _, af = checkpoint_event(log, ptr, a, cache)
    if af and named[af.run or ''] then
      return {'delta', f.ns, f.id, f.run or '', af.id, af.run or ''}
    end
  end
end
