-- A consumer group's housekeeping on one feed, atomically (one slot: the feed and its parked
-- stream share a hash tag). In order:
--   1. park: every pending entry idle for min_idle ms that the group has already delivered
--      max_deliveries times is copied to the parked stream and acknowledged, so no entry is
--      delivered more than max_deliveries times;
--   2. claim: XAUTOCLAIM hands the other entries idle for min_idle ms (a crashed or stuck
--      consumer's, or this one's own unacknowledged ones) to this consumer, counting one more
--      delivery; entries trimmed from the feed meanwhile are acknowledged and reported;
--   3. reap: consumers other than this one with no pending entries, idle for reap_idle ms
--      (0: never), are deleted, so crashed consumers do not accumulate. Deleting a consumer with
--      no pending entries loses nothing; a live one is re-created by its next read.
-- KEYS: feed parked
-- ARGV: group, consumer, min_idle ms, count, max_deliveries, reap_idle ms
-- Returns {parked {id, deliveries, owner, ...}, claimed {id, deliveries, fields, ...},
--          trimmed {id, ...}, reaped {consumer, ...}}, or 'NOGROUP' when the group is missing.
local feed, parked = KEYS[1], KEYS[2]
local group, me = ARGV[1], ARGV[2]
local min_idle, count = tonumber(ARGV[3]), tonumber(ARGV[4])
local max_deliveries, reap_idle = tonumber(ARGV[5]), tonumber(ARGV[6])

local pending = redis.pcall('XPENDING', feed, group, 'IDLE', min_idle, '-', '+', count)
if type(pending) == 'table' and pending.err then
  return 'NOGROUP'
end

local parked_out, trimmed = {}, {}
local function park(id, n, owner)
  local entry = redis.call('XRANGE', feed, id, id)[1]
  if entry then
    local ev = entry[2]
    for _, extra in ipairs({'source', feed, 'source_id', id, 'group', group,
                            'consumer', owner, 'deliveries', tostring(n)}) do
      ev[#ev + 1] = extra
    end
    redis.call('XADD', parked, '*', unpack(ev))
    parked_out[#parked_out + 1] = id
    parked_out[#parked_out + 1] = n
    parked_out[#parked_out + 1] = owner
  else
    trimmed[#trimmed + 1] = id
  end
  redis.call('XACK', feed, group, id)
end

for _, p in ipairs(pending) do
  if p[4] >= max_deliveries then
    park(p[1], p[4], p[2])
  elseif #redis.call('XRANGE', feed, p[1], p[1]) == 0 then
    -- trimmed away (Redis 6.2's XAUTOCLAIM would hand it back as a bare nil, without its id)
    redis.call('XACK', feed, group, p[1])
    trimmed[#trimmed + 1] = p[1]
  end
end

local claimed_out = {}
local reply = redis.call('XAUTOCLAIM', feed, group, me, min_idle, '0-0', 'COUNT', count)
for _, entry in ipairs(reply[2]) do
  local id, fields = entry and entry[1], entry and entry[2]
  if not id then
    -- Redis 6.2: a deleted entry past the XPENDING window above; a later round acknowledges it
  elseif fields then
    local row = redis.call('XPENDING', feed, group, id, id, 1)[1]
    local n = row and row[4] or 1
    if n > max_deliveries then
      -- an entry past the XPENDING window above that had used up its deliveries already
      park(id, n - 1, me)
    else
      claimed_out[#claimed_out + 1] = id
      claimed_out[#claimed_out + 1] = n
      claimed_out[#claimed_out + 1] = fields
    end
  else
    -- Redis 6.2 hands back entries deleted from the stream with no fields
    redis.call('XACK', feed, group, id)
    trimmed[#trimmed + 1] = id
  end
end
-- Redis 7 drops deleted entries from the PEL itself and lists them third
for _, id in ipairs(reply[3] or {}) do
  trimmed[#trimmed + 1] = id
end

local reaped = {}
if reap_idle > 0 then
  for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', feed, group)) do
    local info = {}
    for i = 1, #c, 2 do
      info[c[i]] = c[i + 1]
    end
    if info.name ~= me and tonumber(info.pending) == 0 and tonumber(info.idle) >= reap_idle then
      redis.call('XGROUP', 'DELCONSUMER', feed, group, info.name)
      reaped[#reaped + 1] = info.name
    end
  end
end
return {parked_out, claimed_out, trimmed, reaped}
