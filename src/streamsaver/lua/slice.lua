-- What the long operations run in slices share (replay_slice.lua, verify_slice.lua,
-- compact_slice.lua; import.lua uses the clock): a clock for the slice's budget, the log's first entry (a log rewritten
-- between slices starts with another one), and the state kept for the next slice.

local slice_t0 = redis.call('TIME')

-- Milliseconds since this call started.
local function elapsed_ms()
  local t = redis.call('TIME')
  return (tonumber(t[1]) - tonumber(slice_t0[1])) * 1000 +
    (tonumber(t[2]) - tonumber(slice_t0[2])) / 1000
end

-- Whether this call has spent its budget (ms). The sliced loops ask after each event or index
-- member and stop there, their cursor on it: a slice overruns its budget by one unit of work,
-- not a page of them.
local function over(budget)
  return elapsed_ms() >= budget
end

local function first_entry_id(key)
  local e = redis.call('XRANGE', key, '-', '+', 'COUNT', 1)[1]
  return e and e[1] or ''
end

-- Keep `fields` (name -> value) in hash `st` for the next slice, and let every key of the
-- operation expire an hour after its last slice: one abandoned half-way leaves nothing
-- behind for long.
local function save_slice(st, fields, keys)
  local flat = {}
  for k, v in pairs(fields) do
    flat[#flat + 1] = k
    flat[#flat + 1] = v
  end
  redis.call('HSET', st, unpack(flat))
  for _, key in ipairs(keys) do
    redis.call('PEXPIRE', key, 3600000)
  end
end
