-- A search that looks at every item under a namespace prefix (a filter, a ranking), or a
-- listing of every namespace, in slices of ARGV[5] ms: in one script, a namespace of a million
-- items (or a million namespaces) held the server, every tenant on it, for seconds.
-- The client puts the slices' answers together into what one script would have answered at
-- the moment of its last slice (store/scan.py):
--   'scan'   HSCANs each bucket's items (mitem; mns for namespaces), a page at a time. One
--            there throughout is answered at least once (HSCAN's promise), unchanged since the
--            bucket's first page; the bucket's last log entry id at that page is answered
--            with it.
--   'since'  reads a bucket's log after an id and answers each item (or namespace) an event
--            after it names, as it is now: what changed while the pages went by. The slice
--            reaching the log's end is the moment of the answer.
-- A rebuild swapping a bucket's indexes in (store/store_slice.lua) adds one to its epoch (the HSCAN
-- of the old hash cannot go on in the new one): a scan finding another epoch starts the
-- bucket again.
-- ARGV[1]: 'scan' or 'since'   ARGV[2]: the prefix   ARGV[3]: 'rank' (rows without values:
-- {member, created, updated, event id, ttl ms, vec}), 'values' (rows {member, created,
-- updated, vt, v, event id, ttl ms[, vec]}) or 'names' (rows {namespace, items}: every
-- namespace holding a live item; ARGV[2] is '')   ARGV[4]: 'vec' to add the vectors to
-- 'values' rows, else ''   ARGV[5]: ms after which it stops (having done one page)
-- 'scan': KEYS: mlog mitem mns mvec epoch mnsz mexp of each bucket; ARGV[6]: where to go on, '<n>
--   <cursor> <epoch>' (n: the bucket's place in KEYS, from 1), '' from the first.
--   Returns {where to go on or '', n of a bucket started again (its rows so far are void) or
--   0, {n, last id, ...} of each bucket started, row, ...}
-- 'since': KEYS: mlog mitem mns mvec mexp of one bucket; ARGV[6]: the id to read after.
--   Returns {the last id read, 1 when through the log else 0, row or {member} (gone), ...}
local mode, prefix, rank, vec = ARGV[1], ARGV[2], ARGV[3] == 'rank', ARGV[4] == 'vec'
local names = ARGV[3] == 'names'
local GROUP = 7
local budget = tonumber(ARGV[5])
local now_ms = math.floor(now_us() / 1000)
units_begin()

-- the item's row, or nil when it is not under the prefix, gone or expired
local function row_of(log, mvec, member, raw)
  if not string.find(member, '^%d+:') or not under((split_lp(member)), prefix) then
    return nil
  end
  local it = item_of(raw)
  if not item_alive(it, now_ms) then
    return nil
  end
  local row
  if rank then
    row = { it.created, it.updated, it.eid, string.format('%d', it.ttl),
            redis.call('HGET', mvec, member) or '' }
  else
    row = item_row(log, it, vec)
    if not row then
      return redis.error_reply('STREAMSAVER_STORE_LOST ' .. it.eid)
    end
  end
  table.insert(row, 1, member)
  return row
end

-- a bucket's expired items not swept yet, per namespace (read once a call, at most
-- EXPIRED_MOST of them: past that many in a bucket, a namespace whose every item expired may
-- be listed until the sweep deletes them, rather than every call reading them all)
local EXPIRED_MOST = 1000
local expired_in = {}
local function expired(mexp, ns)
  local by_ns = expired_in[mexp]
  if not by_ns then
    by_ns = {}
    for _, member in ipairs(redis.call('ZRANGEBYSCORE', mexp, '-inf', now_ms, 'LIMIT', 0,
                                       EXPIRED_MOST)) do
      local n = split_lp(member)
      by_ns[n] = (by_ns[n] or 0) + 1
    end
    expired_in[mexp] = by_ns
  end
  return by_ns[ns] or 0
end

-- the namespace's row while it holds more items than have expired (a listing leaves out a
-- namespace whose every item expired, as though the sweep had run)
local function name_of(mns, mexp, ns, count)
  local held = tonumber(count or redis.call('HGET', mns, ns) or '0')
  if held > expired(mexp, ns) then
    return { ns, tostring(held) }
  end
  return nil
end

-- the row of an item (its mitem value raw, or nil to read it) or of a namespace (raw: its
-- count in mns, or nil), whichever the call lists; nil when it is not listed
local function row_for(log, mitem, mns, mvec, mexp, member, raw)
  if names then
    return name_of(mns, mexp, member, raw)
  end
  return row_of(log, mvec, member, raw or redis.call('HGET', mitem, member))
end

local function last_id(log)
  local e = redis.call('XREVRANGE', log, '+', '-', 'COUNT', 1)[1]
  return e and e[1] or '0-0'
end

local out = {}
if mode == 'since' then
  local log, mitem, mns, mvec, mexp = unpack(KEYS, 1, 5)
  out = { ARGV[6], 0 }
  local seen = {}
  while true do
    local batch, asked = log_page(log, '(' .. out[1], 10)
    for _, e in ipairs(batch) do
      local f = fields_of(e[2])
      local member = f.ns and f.key and (names and f.ns or (lp(f.ns) .. f.key))
      if member and not seen[member] then
        seen[member] = true
        local row = row_for(log, mitem, mns, mvec, mexp, member, nil)
        if row and row.err then
          return row
        end
        out[#out + 1] = row or { member }
      end
      out[1] = e[1]
    end
    if #batch < asked then
      out[2] = 1
      return out
    end
    if over(budget) then
      return out
    end
  end
end

local n, cursor, epoch = 1, '0', nil
if ARGV[6] ~= '' then
  local a, b, c = string.match(ARGV[6], '^(%d+) (%S+) ?(%S*)$')
  n, cursor, epoch = tonumber(a), b, c ~= '' and c or nil
end
local starts = {}
out = { '', 0, starts }
while n <= #KEYS / GROUP do
  local log, mitem, mns, mvec, ep, mnsz, mexp = unpack(KEYS, GROUP * n - GROUP + 1, GROUP * n)
  local now_epoch = redis.call('HGET', ep, 'n') or '0'
  if epoch and epoch ~= now_epoch then
    -- a rebuild swapped the bucket's indexes in under the scan
    out[2], cursor = n, '0'
  end
  epoch = now_epoch
  local matching = false
  if cursor == '0' then
    matching = holds_prefix(mns, mnsz, prefix)
    if matching then
      starts[#starts + 1] = n
      starts[#starts + 1] = last_id(log)
    end
  end
  if cursor ~= '0' or matching then
    repeat
      local page = redis.call('HSCAN', names and mns or mitem, cursor, 'COUNT', 8)
      cursor = page[1]
      local flat = page[2]
      for i = 1, #flat, 2 do
        local row = row_for(log, mitem, mns, mvec, mexp, flat[i], flat[i + 1])
        if row and row.err then
          return row
        end
        out[#out + 1] = row
      end
    until cursor == '0' or over(budget)
  end
  if cursor ~= '0' then
    out[1] = n .. ' ' .. cursor .. ' ' .. epoch
    return out
  end
  n, epoch = n + 1, nil
  if n <= #KEYS / GROUP and over(budget) then
    out[1] = n .. ' 0'
    return out
  end
end
return out
