"""The entry memory of a cluster: which entries of each source were already seen, in Redis.

The same memory as :mod:`scrapy_whittle.service.entry_memory` (64-bit XXH3 hashes of entry keys,
oldest first, capacity following the feed plus an eighth), kept per source in a field of a
small hash (``Keys.entries``) as a 4-byte capacity and the packed hashes. One Lua script
tells which of a fetch's entries are new and remembers them, atomically: two workers can
never both take an entry for new, so an entry is emitted once across the cluster. It returns
how many entries the source had remembered before (a window is full only when there were
some: :func:`~scrapy_whittle.service.outcomes.judge_fetch`) and a flag per distinct entry
shown ("1": new), at most ``max_entries_per_source`` of them.
"""

from __future__ import annotations

import xxhash

from scrapy_whittle.feeds.parse import FeedEntry

DEDUPE = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
local maxn = tonumber(ARGV[2])
local cap, known, oldlist = 0, {}, {}
if old then
  cap = struct.unpack('<I4', old)
  for i = 5, #old - 7, 8 do
    local h = string.sub(old, i, i + 7)
    oldlist[#oldlist + 1] = h
    known[h] = true
  end
end
local shown = ARGV[4]
local n = math.min(math.floor(#shown / 8), maxn)
local flags, seen, vis = {}, {}, {}
for i = 1, n do
  local h = string.sub(shown, (i - 1) * 8 + 1, i * 8)
  if not seen[h] then
    seen[h] = true
    vis[#vis + 1] = h
    flags[#flags + 1] = known[h] and '0' or '1'
  end
end
local visible = #vis
cap = math.min(math.max(cap, visible + math.max(tonumber(ARGV[3]), math.floor(visible / 8))), maxn)
local out = {}
for _, h in ipairs(oldlist) do
  if not seen[h] then out[#out + 1] = h end
end
for i = #vis, 1, -1 do out[#out + 1] = vis[i] end
local first = math.max(1, #out - cap + 1)
redis.call('HSET', KEYS[1], ARGV[1], struct.pack('<I4', cap) .. table.concat(out, '', first, #out))
return {#oldlist, table.concat(flags)}
"""


def packed_hashes(entries: list[FeedEntry]) -> tuple[list[FeedEntry], bytes]:
    """The distinct entries (first occurrence, feed order) and their packed hashes."""
    first: dict[str, FeedEntry] = {}
    for entry in entries:
        first.setdefault(entry.key, entry)
    h = xxhash.xxh3_64_intdigest
    raw = b"".join(h(k.encode("utf-8", "surrogatepass")).to_bytes(8, "little") for k in first)
    return list(first.values()), raw
