-- One page of list(): checkpoints namespace by namespace (see below), newest first within
-- each, each in checkpoint/read.lua's shape, after a cursor.
-- KEYS: log ix ptr
-- ARGV: [1] lp(ns), or '' for every namespace   [2] exact checkpoint id or ''
--       [3] before: only ids strictly lower, or ''   [4] page size
--       [5] cursor: the last member the previous page looked at, or 'c' .. lp(ns) when it
--           stopped on entering ns, or ''
--       [6] msgpack [key, form, ...]: top-level metadata values that must be equal, each as
--       shared/meta.lua's form, or ''   [7] msgpack list of keys that must be absent or null, or ''
--       [8] '' or, with a namespace, msgpack [channel, version, head, ...] of list values the
--       client holds (as in checkpoint/get.lua)
-- Returns {cursor, checkpoint, ...}; cursor is '' once nothing is left. A page stops after
-- SCAN_CAP members, or once the events the filter passed over hold SKIPPED_BYTES, so a
-- selective filter cannot block the server for long: each member's event is read whole (its
-- metadata is in it), and a thread's events may be large (values stored whole, a compaction's
-- self-contained copies): 1,000 of them were megabytes in one call (72 ms for 120 events of
-- 20 KB, none matching). What a page returns is bounded by its size, as its values go to the
-- caller whole (the oldest of a page in full, each later one as what it adds). The page is read
-- oldest first, and each checkpoint's values only send what the previous one (in that order)
-- did not: older values are prefixes of newer ones, so a page costs about one value, not one
-- per checkpoint.
local SCAN_CAP, SKIPPED_BYTES = 1000, 65536

local p, exact, before = ARGV[1], ARGV[2], ARGV[3]
local size, cursor = tonumber(ARGV[4]), ARGV[5]
local filter = nil
if ARGV[6] ~= '' then
  local flat = cmsgpack.unpack(ARGV[6])
  filter = {}
  for i = 1, #flat, 2 do
    filter[flat[i]] = flat[i + 1]
  end
end
local nulls = {}
if ARGV[7] ~= '' then
  nulls = cmsgpack.unpack(ARGV[7])
end

local function matches(eid, f)
  if filter == nil and #nulls == 0 then
    return true
  end
  -- forms, not cmsgpack's values: those lose integers beyond 2^53 and [] vs {} (shared/meta.lua);
  -- metadata that is not a map was altered after it was projected
  local ok, meta = pcall(meta_fields, f.meta or '')
  if not ok then
    corrupt('event ' .. eid .. ' has a meta field that cannot be decoded: it was altered ' ..
      'after it was projected (`streamsaver audit verify` names the edit)')
  end
  if filter ~= nil then
    for k, form in pairs(filter) do
      if meta[k] ~= form then
        return false
      end
    end
  end
  for _, k in ipairs(nulls) do
    if meta[k] ~= nil and meta[k] ~= 'z' then
      return false
    end
  end
  return true
end

local picked, cache, skipped = {}, {}, 0

local function bytes_of(f)
  local n = 0
  for k, v in pairs(f) do
    n = n + #k + #v
  end
  return n
end

local function finish(cursor_out)
  local holds = {}
  if p ~= '' and ARGV[8] ~= nil and ARGV[8] ~= '' then
    local flat = cmsgpack.unpack(ARGV[8])
    holds[p] = {}
    for i = 1, #flat, 3 do
      holds[p][flat[i]] = {flat[i + 1], flat[i + 2]}
    end
  end
  local results = {}
  for j = #picked, 1, -1 do
    local eid, f = picked[j][1], picked[j][2]
    local np = lp(f.ns)
    holds[np] = holds[np] or {}
    local r = read_checkpoint(KEYS[1], KEYS[3], eid, f, cache, holds[np])
    local values = r[3]
    for i = 1, #values, 5 do
      holds[np][values[i]] = {values[i + 1], values[i + 2]}
    end
    results[j] = r
  end
  local out = {cursor_out}
  for j = 1, #picked do
    out[#out + 1] = results[j]
  end
  return out
end

-- The lex range of namespace q's (an lp()) members that the call wants, or nil for none.
-- Members sort by id within a namespace; \255 never occurs in UTF-8, so it is above every id.
local function bounds(q)
  local base = 'c' .. q
  if exact ~= '' then
    if before ~= '' and not bytes_lt(exact, before) then
      return nil
    end
    return '[' .. base .. exact, '[' .. base .. exact
  elseif before ~= '' then
    return '[' .. base, '(' .. base .. before
  end
  return '[' .. base, '[' .. base .. '\255'
end

-- 'c' .. lp(ns) .. id -> lp(ns)
local function ns_of(m)
  return lp((split_lp(string.sub(m, 2))))
end

-- The namespace after q in the index (the first one when q is nil), or nil. Every namespace
-- in the index has a member, so this is one O(log n) lookup, whatever the thread holds.
local function next_ns(q)
  local lo = q and ('(c' .. q .. '\255') or '[c'
  local r = redis.call('ZRANGEBYLEX', KEYS[2], lo, '(d', 'LIMIT', 0, 1)
  return r[1] and ns_of(r[1])
end

-- Every namespace ('' in ARGV[1]) is read one namespace after another in the index's order,
-- newest first within each: lp('') = '0:' sorts below every other lp(), so the root namespace
-- comes first, as with InMemorySaver (then subgraph namespaces by lp(ns) bytes). A cursor
-- names its namespace, so a page is O(log n) per namespace it enters and per member.
local q, from = p, cursor
if p == '' then
  q = cursor ~= '' and ns_of(cursor) or next_ns(nil)
end
-- Lua builds a string for every member fetched: the first batch asks for what the page still
-- needs, which an unfiltered list fills; only a filter that skips members goes on in bigger
-- batches. Entering a namespace counts as a member scanned, so a bound that leaves many
-- namespaces empty cannot block the server for long either.
local scanned, found = 0, false
while q ~= nil do
  local lo, hi = bounds(q)
  if lo ~= nil and from ~= '' then
    hi = '(' .. from
  end
  from = ''
  local want = size - #picked
  while lo ~= nil do
    local batch = redis.call('ZREVRANGEBYLEX', KEYS[2], hi, lo, 'LIMIT', 0, want)
    found = found or #batch > 0
    for _, m in ipairs(batch) do
      scanned = scanned + 1
      local eid, f = checkpoint_event(KEYS[1], KEYS[3], m, cache, true)
      if eid ~= nil and matches(eid, f) then
        picked[#picked + 1] = {eid, f}
      elseif f then
        skipped = skipped + bytes_of(f)
      end
      if #picked >= size or scanned >= SCAN_CAP or skipped >= SKIPPED_BYTES then
        return finish(m)
      end
    end
    if #batch < want then
      break
    end
    hi = '(' .. batch[#batch]
    want = 100
  end
  if p ~= '' then
    break
  end
  scanned = scanned + 1
  if scanned >= SCAN_CAP then
    -- below every member of q: the next page starts at the namespace after it
    return finish('c' .. q)
  end
  q = next_ns(q)
end
-- a thread that lost keys (an eviction) must not read as holding nothing (checkpoint/read.lua)
if not found and cursor == '' then
  check_absent(KEYS[1], KEYS[2], KEYS[3], nil)
end
return finish('')
