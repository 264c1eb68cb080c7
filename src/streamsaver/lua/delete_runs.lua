-- delete_for_runs on one thread: append one "delete" event naming every checkpoint of the
-- given runs, and project it. Appends nothing when the thread has none of them.
-- KEYS: log ix ptr feed   ARGV[1]: the feed's MAXLEN   ARGV[2]: 'chain' or '' (common.lua)
-- ARGV[3]: thread id   ARGV[4..]: run ids
-- Returns the number of checkpoints deleted.
local items, runs = {}, {}
for i = 4, #ARGV do
  local r = 'r' .. lp(ARGV[i])
  local ms = redis.call('ZRANGEBYLEX', KEYS[2], '[' .. r, '[' .. r .. '\255')
  if #ms > 0 then
    runs[#runs + 1] = ARGV[i]
  end
  for _, m in ipairs(ms) do
    local ns, cid = split_lp(string.sub(m, #r + 1))
    items[#items + 1] = ns
    items[#items + 1] = cid
  end
end
if #items == 0 then
  return 0
end
local ev = {'k', 'delete', 'sv', tostring(SCHEMA), 'thread', ARGV[3],
            'items', cmsgpack.pack(items), 'runs', cmsgpack.pack(runs)}
local id = append_event(KEYS[1], ev)
local f = fields_of(ev)
apply(KEYS[1], KEYS[2], KEYS[3], id, f)
notify(KEYS[4], ARGV[1], id, f)
return #items / 2
