-- One page of list(): checkpoints newest first, each in read.lua's shape, after a cursor.
-- KEYS: log ix ptr
-- ARGV: [1] lp(ns), or '' for every namespace   [2] exact checkpoint id or ''
--       [3] before: only ids strictly lower, or ''   [4] page size
--       [5] cursor: the last member the previous page looked at, or ''
--       [6] msgpack [key, form, ...]: top-level metadata values that must be equal, each as
--       meta.lua's form, or ''   [7] msgpack list of keys that must be absent or null, or ''
--       [8] '' or, with a namespace, msgpack [channel, version, head, ...] of list values the
--       client holds (as in get.lua)
-- Returns {cursor, checkpoint, ...}; cursor is '' once nothing is left. A page stops after
-- SCAN_CAP members so a selective filter cannot block the server for long. The page is read
-- oldest first, and each checkpoint's values only send what the previous one (in that order)
-- did not: older values are prefixes of newer ones, so a page costs about one value, not one
-- per checkpoint.
local SCAN_CAP = 1000

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

local function matches(f)
  if filter == nil and #nulls == 0 then
    return true
  end
  -- forms, not cmsgpack's values: those lose integers beyond 2^53 and [] vs {} (meta.lua)
  local meta = meta_fields(f.meta)
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

local lo, hi = '[c' .. p, '[c' .. p .. '\255'
if p ~= '' and exact ~= '' then
  lo = '[c' .. p .. exact
  hi = lo
elseif p ~= '' and before ~= '' then
  hi = '(c' .. p .. before
end
if cursor ~= '' then
  hi = '(' .. cursor
end

local picked, cache = {}, {}

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

-- Lua builds a string for every member fetched: the first batch asks for one page, which an
-- unfiltered list fills; only a filter that skips members goes on in bigger batches.
local scanned, want = 0, size
while true do
  local batch = redis.call('ZREVRANGEBYLEX', KEYS[2], hi, lo, 'LIMIT', 0, want)
  want = 100
  if #batch == 0 then
    return finish('')
  end
  for _, m in ipairs(batch) do
    scanned = scanned + 1
    local _, cid = split_lp(string.sub(m, 2))
    local wanted = true
    if p == '' then
      wanted = (exact == '' or cid == exact) and (before == '' or bytes_lt(cid, before))
    end
    if wanted then
      local eid, f = checkpoint_event(KEYS[1], KEYS[3], m, cache)
      if eid ~= nil and matches(f) then
        picked[#picked + 1] = {eid, f}
      end
    end
    if #picked >= size or scanned >= SCAN_CAP then
      return finish(m)
    end
  end
  hi = '(' .. batch[#batch]
end
