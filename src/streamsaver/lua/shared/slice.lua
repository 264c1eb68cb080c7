-- What the long operations run in slices share (checkpoint/replay_slice.lua,
-- checkpoint/verify_slice.lua, checkpoint/compact_slice.lua; checkpoint/import.lua,
-- projector/project.lua and checkpoint/delete_runs.lua's check use the clock): a clock for the
-- slice's budget, the log's first entry (a log rewritten between slices starts with another one),
-- and the state kept for the next slice. It is the entry's first file (lua/__init__.py), so the
-- clock starts before the other files' definitions run.

-- The clock: Valkey (8+) answers a script's TIME with the time the script started, every
-- call, so no budget would ever be spent there and each slice ran to its end; it has
-- os.clock() instead (the server's CPU time, which a running script spends as it goes).
-- Redis has no `os` in scripts (reading a missing global raises: rawget does not), and its
-- TIME goes on.
local slice_os = rawget(_G, 'os')
local slice_cpu = slice_os and slice_os.clock
local slice_t0 = slice_cpu and slice_cpu() or redis.call('TIME')

-- Milliseconds since this call started.
local function elapsed_ms()
  if slice_cpu then
    return (slice_cpu() - slice_t0) * 1000
  end
  local t = redis.call('TIME')
  return (tonumber(t[1]) - tonumber(slice_t0[1])) * 1000 +
    (tonumber(t[2]) - tonumber(slice_t0[2])) / 1000
end

local slice_asked, slice_unit = 0, 0

-- Where a call's units of work begin: what ran before (its setup: definitions, its state
-- read) counts in its time, not as a unit. A script that does not say counts its setup in
-- its first unit, which then predicts every other to be as long: a seed slice of 2 us events
-- stopped after one.
local function units_begin()
  slice_asked = elapsed_ms()
end

-- Whether this call should stop (its budget in ms). The sliced loops ask after each event or
-- index member and stop there, their cursor on it. A unit of work may take as long as the
-- longest one seen in this call: stopping only once the budget was spent made every slice
-- overrun it by a unit, and a compaction's unit (a checkpoint copied with its writes) is most
-- of a budget (benchmarks.stall: 0.56 ms slices at p99 for 0.25 ms).
local function over(budget)
  local now = elapsed_ms()
  slice_unit = math.max(slice_unit, now - slice_asked)
  slice_asked = now
  return now + slice_unit >= budget
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
