-- One thread's registry row, computed as the projector does (projector/registry.lua), for the readers'
-- fallback when no projector runs.   KEYS: log ix ptr   Returns the row, or nil when gone.
local row = thread_row(KEYS[1], KEYS[2], KEYS[3])
if row == nil then
  return nil
end
return cmsgpack.pack(row)
