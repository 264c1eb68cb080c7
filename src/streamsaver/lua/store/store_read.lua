-- Reads of one or more buckets (several only on a standalone server, where every key is on
-- one node; on a cluster the client sends one call per bucket, pipelined).
-- ARGV[1]: 'get'; KEYS: mlog mitem of one bucket; ARGV[2..]: members (lp(ns) .. key): per
--          member, false or {created, updated, vt, v, event id, ttl ms}
-- ARGV[1]: 'vecs': as 'get', each row with the item's vectors added (the candidates the
--          server's vector index found)
-- ARGV[1]: 'search'; KEYS: mlog mix mitem mns mnsz of each bucket; ARGV[2]: namespace prefix (''
--          for all); ARGV[3]: how many: {member, created, updated, vt, v, event id, ttl ms}
--          per item, the newest of all buckets given, newest first; or {'scan'} when that
--          would look at more than LOOK_MOST members (a search that looks at every item under
--          its prefix, a filter or a ranking, is store/store_scan.lua's)
-- ARGV[1]: 'events'; KEYS: mlog of one bucket; ARGV[2..]: event ids: per id {vt, v}, or false
--          when the log no longer holds it

-- Items whose TTL ran out are left out, as though the sweep had deleted them already.
local mode = ARGV[1]
local now_ms = math.floor(now_us() / 1000)

local function alive(it)
  return item_alive(it, now_ms)
end

if mode == 'get' or mode == 'vecs' then
  local out = {}
  for i = 2, #ARGV do
    local it = item_of(redis.call('HGET', KEYS[2], ARGV[i]))
    local v = alive(it) and item_row(KEYS[1], it, mode == 'vecs')
    if it and not v and alive(it) then
      return redis.error_reply('STREAMSAVER_STORE_LOST ' .. it.eid)
    end
    out[#out + 1] = v or false
  end
  return out
end

if mode == 'events' then
  local out = {}
  for i = 2, #ARGV do
    local found = redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i])[1]
    local f = found and fields_of(found[2])
    out[#out + 1] = f and { f.vt, f.v } or false
  end
  return out
end

local out = {}
-- search; KEYS: mlog mix mitem mns mnsz of each bucket
local prefix, want = ARGV[2], tonumber(ARGV[3])
-- the members a search looks at before it answers {'scan'} instead: a deep page (a large
-- offset or limit) or a prefix with few items in buckets of many others would otherwise hold
-- the server for as long; the client then reads the prefix's items in slices (store/store_scan.lua)
local LOOK_MOST, looked = 2000, 0
for b = 1, #KEYS, 5 do
  local log, mix, mitem = KEYS[b], KEYS[b + 1], KEYS[b + 2]
  if holds_prefix(KEYS[b + 3], KEYS[b + 4], prefix) then
    -- newest first; a page at a time, until enough live items of the prefix are found
    local found, start = 0, 0
    while found < want do
      local page = redis.call('ZREVRANGE', mix, start, start + 255)
      looked = looked + #page
      if looked > LOOK_MOST then
        return { 'scan' }
      end
      for _, member in ipairs(page) do
        local ns = split_lp(member)
        if found < want and under(ns, prefix) then
          local it = item_of(redis.call('HGET', mitem, member))
          if alive(it) then
            found = found + 1
            out[#out + 1] = { member, it, log }
          end
        end
      end
      if #page < 256 then
        break
      end
      start = start + 256
    end
  end
end
-- several buckets: only the newest `want` of them all are read and sent back
if #KEYS > 5 and #out > want then
  -- ties (other servers' clocks) by member bytes, as the client orders them
  table.sort(out, function(x, y)
    local a, b = tonumber(x[2].updated), tonumber(y[2].updated)
    if a ~= b then
      return a > b
    end
    return bytes_lt(x[1], y[1])
  end)
end
local rows = {}
for i, row in ipairs(out) do
  if i > want then
    break
  end
  local v = item_row(row[3], row[2], false)
  if not v then
    return redis.error_reply('STREAMSAVER_STORE_LOST ' .. row[2].eid)
  end
  table.insert(v, 1, row[1])
  rows[#rows + 1] = v
end
return rows
