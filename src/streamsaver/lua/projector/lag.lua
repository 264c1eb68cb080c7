-- How far the projector is behind on one slot.
-- KEYS: feed state   ARGV: [1] count no more than this many entries
-- Returns {usable (1, or 0: trimmed past the cursor, or never seeded on 6.2), cursor, entries
-- after it (at most ARGV[1]), the oldest of them or ''}.
local cursor = usable_cursor(KEYS[1], KEYS[2])
local usable = cursor and 1 or 0
cursor = cursor or redis.call('HGET', KEYS[2], 'cursor') or '0-0'
local pending = after_cursor(KEYS[1], cursor, '+', tonumber(ARGV[1]))
return {usable, cursor, #pending, pending[1] and pending[1][1] or ''}
