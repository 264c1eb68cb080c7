-- Metadata as filters compare it (checkpoint/list.lua) and the projector indexes it
-- (projector/registry.lua), read from its msgpack bytes. Not through cmsgpack: it turns integers
-- into doubles (two ids beyond 2^53 become one number) and [] and {} into the same empty table.
-- streamsaver/core/metadata.py's metadata_form() is the same definition, for the values a filter
-- holds.
--
-- A value's form is a string; two values have the same form exactly when Python's == says they
-- are equal (what InMemorySaver compares with): 1, 1.0 and true are one number, a float that is
-- not an integer is its 17 significant digits, NaN equals nothing, keys' order does not count.
--   nil 'z'   integer (bool, integral float) 'i' [-] lowercase hex ';'   other float 'f' %.17g ';'
--   str 's' lp(bytes)   bin 'y' lp(bytes)   ext 'e' type lp(bytes)
--   array 'l' n ':' forms   map 'm' n ':' (key form, value form) sorted by key form bytes
-- Every form is prefix-free, so a sequence of forms reads back one way.

local byte, sub, format = string.byte, string.sub, string.format
local TWO32 = 4294967296
local TWO64 = 18446744073709551616

local function int_form(negative, hi, lo)
  if hi == 0 and lo == 0 then
    return 'i0;'
  end
  local digits
  if hi > 0 then
    digits = format('%x%08x', hi, lo)
  else
    digits = format('%x', lo)
  end
  return (negative and 'i-' or 'i') .. digits .. ';'
end

local function float_form(v)
  if v ~= v then
    -- never sent by a filter (core/metadata.py), so a stored NaN matches nothing
    return 'fnan;'
  end
  if v == math.floor(v) and v > -TWO64 and v < TWO64 then
    local m = math.abs(v)
    local hi = math.floor(m / TWO32)
    return int_form(v < 0, hi, m - hi * TWO32)
  end
  return 'f' .. format('%.17g', v) .. ';'
end

local function meta_uint(s, pos, n)
  if pos + n - 1 > #s then
    error('metadata msgpack is truncated')
  end
  local v = 0
  for i = pos, pos + n - 1 do
    v = v * 256 + byte(s, i)
  end
  return v
end

local function meta_bytes(s, pos, n)
  if pos + n - 1 > #s then
    error('metadata msgpack is truncated')
  end
  return sub(s, pos, pos + n - 1), pos + n
end

-- signed big-endian integer of n <= 4 bytes
local function small_int(s, pos, n)
  local v = meta_uint(s, pos, n)
  local half = 2 ^ (8 * n - 1)
  if v >= half then
    v = v - 2 * half
  end
  return int_form(v < 0, 0, math.abs(v)), pos + n
end

local meta_form

local function array_form(s, pos, n)
  if n == 0 then
    return 'l0:', pos
  end
  local out = {'l' .. n .. ':'}
  for i = 1, n do
    out[i + 1], pos = meta_form(s, pos)
  end
  return table.concat(out), pos
end

local function map_form(s, pos, n)
  if n == 0 then
    return 'm0:', pos
  end
  local entries = {}
  for i = 1, n do
    local k, v
    k, pos = meta_form(s, pos)
    v, pos = meta_form(s, pos)
    entries[i] = {k, v}
  end
  -- by bytes (bytes_lt, shared/common.lua): Lua's < follows the server's locale
  table.sort(entries, function(a, b)
    return bytes_lt(a[1], b[1])
  end)
  local out = {'m' .. n .. ':'}
  for _, e in ipairs(entries) do
    out[#out + 1] = e[1]
    out[#out + 1] = e[2]
  end
  return table.concat(out), pos
end

local function lp_form(tag, s, pos, n)
  local raw
  raw, pos = meta_bytes(s, pos, n)
  return tag .. lp(raw), pos
end

-- The form of the msgpack value at byte `pos` of `s`, and the position after it.
meta_form = function(s, pos)
  local b = byte(s, pos)
  -- the common kinds first (metadata is mostly short strings and small ints), without calls
  if b == nil then
    error('metadata msgpack is truncated')
  elseif b >= 0xa0 and b <= 0xbf then
    local stop = pos + b - 0xa0
    if stop > #s then
      error('metadata msgpack is truncated')
    end
    return 's' .. (b - 0xa0) .. ':' .. sub(s, pos + 1, stop), stop + 1
  elseif b < 10 then
    return 'i' .. b .. ';', pos + 1
  elseif b <= 0x7f then
    return int_form(false, 0, b), pos + 1
  elseif b >= 0xe0 then
    return int_form(true, 0, 256 - b), pos + 1
  elseif b <= 0x8f then
    return map_form(s, pos + 1, b - 0x80)
  elseif b <= 0x9f then
    return array_form(s, pos + 1, b - 0x90)
  elseif b == 0xc0 then
    return 'z', pos + 1
  elseif b == 0xc2 then
    return 'i0;', pos + 1
  elseif b == 0xc3 then
    return 'i1;', pos + 1
  elseif b >= 0xc4 and b <= 0xc6 then
    local w = 2 ^ (b - 0xc4)
    return lp_form('y', s, pos + 1 + w, meta_uint(s, pos + 1, w))
  elseif b >= 0xc7 and b <= 0xc9 then
    local w = 2 ^ (b - 0xc7)
    local n = meta_uint(s, pos + 1, w)
    local t = meta_uint(s, pos + 1 + w, 1)
    return lp_form('e' .. t, s, pos + 2 + w, n)
  elseif b == 0xca then
    return float_form(struct.unpack('>f', (meta_bytes(s, pos + 1, 4)))), pos + 5
  elseif b == 0xcb then
    return float_form(struct.unpack('>d', (meta_bytes(s, pos + 1, 8)))), pos + 9
  elseif b >= 0xcc and b <= 0xce then
    local w = 2 ^ (b - 0xcc)
    return int_form(false, 0, meta_uint(s, pos + 1, w)), pos + 1 + w
  elseif b == 0xcf then
    return int_form(false, meta_uint(s, pos + 1, 4), meta_uint(s, pos + 5, 4)), pos + 9
  elseif b >= 0xd0 and b <= 0xd2 then
    return small_int(s, pos + 1, 2 ^ (b - 0xd0))
  elseif b == 0xd3 then
    local hi, lo = meta_uint(s, pos + 1, 4), meta_uint(s, pos + 5, 4)
    if hi < TWO32 / 2 then
      return int_form(false, hi, lo), pos + 9
    end
    -- two's complement: the magnitude is 2^64 minus the unsigned value
    if lo == 0 then
      return int_form(true, TWO32 - hi, 0), pos + 9
    end
    return int_form(true, TWO32 - 1 - hi, TWO32 - lo), pos + 9
  elseif b >= 0xd4 and b <= 0xd8 then
    local t = meta_uint(s, pos + 1, 1)
    return lp_form('e' .. t, s, pos + 2, 2 ^ (b - 0xd4))
  elseif b >= 0xd9 and b <= 0xdb then
    local w = 2 ^ (b - 0xd9)
    return lp_form('s', s, pos + 1 + w, meta_uint(s, pos + 1, w))
  elseif b == 0xdc or b == 0xdd then
    local w = b == 0xdc and 2 or 4
    return array_form(s, pos + 1 + w, meta_uint(s, pos + 1, w))
  elseif b == 0xde or b == 0xdf then
    local w = b == 0xde and 2 or 4
    return map_form(s, pos + 1 + w, meta_uint(s, pos + 1, w))
  end
  error('metadata msgpack has an unknown type byte ' .. b)
end

-- A checkpoint's metadata (msgpack map) as {top-level key -> form of its value}; string keys
-- only (filters have no others). Raises on bytes that are not a msgpack map.
local function meta_fields(s)
  local b = byte(s, 1) or 0
  local n, pos
  if b >= 0x80 and b <= 0x8f then
    n, pos = b - 0x80, 2
  elseif b == 0xde or b == 0xdf then
    local w = b == 0xde and 2 or 4
    n, pos = meta_uint(s, 2, w), 2 + w
  else
    error('metadata is not a msgpack map')
  end
  local out = {}
  for _ = 1, n do
    local k, v
    b = byte(s, pos)
    if b and b >= 0xa0 and b <= 0xbf then
      -- a short key, read as it is rather than through its form
      k, pos = sub(s, pos + 1, pos + b - 0xa0), pos + 1 + b - 0xa0
    else
      k, pos = meta_form(s, pos)
      k = sub(k, 1, 1) == 's' and (split_lp(sub(k, 2))) or nil
    end
    v, pos = meta_form(s, pos)
    if k then
      out[k] = v
    end
  end
  return out
end

-- A form as a metadata index member holds it: long forms (big nested values) by their digest.
-- Readers take index members as candidates and check each exactly, so this costs nothing.
local function indexed_form(form)
  if #form <= 64 then
    return form
  end
  return 'h' .. redis.sha1hex(form)
end
