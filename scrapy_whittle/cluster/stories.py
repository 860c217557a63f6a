"""The story memory of a cluster (``WHITTLE_DEDUP = "link"``): which stories the crawl already
has, across its sources, in Redis.

The same identity as one process's :mod:`scrapy_whittle.service.story_memory`: the XXH3-64
hashes of an entry's story keys (:func:`~scrapy_whittle.feeds.story.story_keys`: its
normalised link, its id where that is a URL). The entry dedupe script
(:data:`~scrapy_whittle.cluster.entries.DEDUPE`) looks the stories of the entries new to
their feed up in the same atomic step that remembers the entries and stores the pending
batch: of two workers fetching two feeds that list one story, one emits it, the other finds
it a repeat (no item, no reward for the policy: the feed is learnt to bring little).

Layout: a story hash ``h`` lives in shard ``h mod SHARDS``; the shards are the fields of
``SHARDS / 64`` hashes (``Keys.stories``), each field the packed 8-byte hashes of its
stories, least recently seen first (a repeat moves its story to the recent end). Each shard
keeps at most ``max(SHARD_MIN, ceil(2 * held / SHARDS))`` hashes, ``held`` being the
hashes every source's entry memory may hold (``Keys.entry_capacity``, kept by the dedupe
script): the one-process bound (twice the entry memory) spread over the shards, the least
recently seen of a shard forgotten first. So the memory is bounded, a story is about 8 bytes
in Redis, and a lookup scans one short string.

The node computes each entry's story hashes (a feed's whole column of links at once when each
entry has one key in its normal form, as one process does; else entry by entry, a small cache
keeping those of the entries a feed shows again and again) and names the shards they fall in:
:func:`story_args`.
"""

from __future__ import annotations

from collections.abc import Sequence

from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.feeds.story import (
    DROP_PARAMS,
    ParamFilter,
    story_key_column,
    story_keys,
)
from scrapy_whittle.service.entry_memory import key_hashes

#: shards of the story memory, and shards a Redis hash
SHARDS = 65536
PER_KEY = 64
#: hashes a shard may keep whatever the entry memory holds
SHARD_MIN = 8
#: entries whose story hashes a node keeps at hand
CACHE = 1 << 16

#: the part of the dedupe script that tells repeats (``flags[j]`` '2'), run after the entry
#: memory marked the entries new to the feed ('1'): ARGV[5] holds, per distinct entry shown,
#: a count byte then per story hash 8 bytes of hash, 2 of its shard key's place after
#: KEYS[5] (the entry capacity counter), 1 of its field
STORY_LUA = f"""
local spec = ARGV[5]
if #spec > 0 then
  local offs, pos = {{}}, 1
  for i = 1, n do
    offs[i] = pos
    pos = pos + 1 + 11 * string.byte(spec, pos)
  end
  local held = tonumber(redis.call('GET', KEYS[5]) or '0')
  local keep = 8 * math.max({SHARD_MIN}, math.ceil(2 * held / {SHARDS}))
  local shards, order = {{}}, {{}}
  local function find8(s, h)
    local i = 1
    while true do
      local k = string.find(s, h, i, true)
      if not k or (k - 1) % 8 == 0 then return k end
      i = k + 1
    end
  end
  for j = 1, #vis do
    if flags[j] == '1' then
      local p = offs[at[j]]
      local hs, known = {{}}, false
      for q = 0, string.byte(spec, p) - 1 do
        local r = p + 1 + 11 * q
        local h = string.sub(spec, r, r + 7)
        local ki = struct.unpack('<I2', spec, r + 8)
        local id = ki * 64 + string.byte(spec, r + 10)
        local sh = shards[id]
        if not sh then
          local f = string.byte(spec, r + 10)
          sh = {{KEYS[5 + ki], f, redis.call('HGET', KEYS[5 + ki], f) or ''}}
          shards[id] = sh
          order[#order + 1] = sh
        end
        hs[#hs + 1] = {{sh, h}}
        known = known or find8(sh[3], h) ~= nil
      end
      if known then flags[j] = '2' end
      for _, x in ipairs(hs) do
        local sh, h = x[1], x[2]
        local k = find8(sh[3], h)
        if k then sh[3] = string.sub(sh[3], 1, k - 1) .. string.sub(sh[3], k + 8) end
        sh[3] = sh[3] .. h
      end
    end
  end
  for _, sh in ipairs(order) do
    local s = sh[3]
    if #s > keep then s = string.sub(s, #s - keep + 1) end
    redis.call('HSET', sh[1], sh[2], s)
  end
end
"""


class StoryHashes:
    """A node's view of the story identity: each entry's story hashes, each as (its 8 bytes,
    the hash of shards it falls in, its field there), cached by the entry's key and link (a
    feed shows most of its entries on many fetches)."""

    def __init__(self, drop: Sequence[str] | None) -> None:
        self.params = ParamFilter(DROP_PARAMS if drop is None else drop)
        self.cache: dict[tuple, tuple[tuple[bytes, int, int], ...]] = {}

    def key_hashes(self, keys: Sequence[str]) -> list[int]:
        """The hashes of story keys (XXH3-64)."""
        return key_hashes(keys)

    def hashes(self, entry: FeedEntry) -> tuple[int, ...]:
        """The entry's story hashes."""
        return tuple(self.key_hashes(story_keys(entry, self.params)))

    def records(self, entry: FeedEntry) -> tuple[tuple[bytes, int, int], ...]:
        key = (entry.key, entry.link)
        got = self.cache.get(key)
        if got is None:
            if len(self.cache) >= CACHE:          # the oldest half goes
                for old in list(self.cache)[:CACHE // 2]:
                    del self.cache[old]
            got = self.cache[key] = tuple(map(_record, self.hashes(entry)))
        return got

    def all_records(self, entries: Sequence[FeedEntry]
                    ) -> list[tuple[tuple[bytes, int, int], ...]]:
        """:meth:`records` of each of ``entries``: the feed's column of links at once when
        each entry has one story key in its normal form (as one process does:
        :func:`~scrapy_whittle.feeds.story.story_key_column`), else entry by entry."""
        column = story_key_column(entries)
        if column is None:
            return [self.records(entry) for entry in entries]
        return [(_record(h),) for h in self.key_hashes(column)]


def _record(h: int) -> tuple[bytes, int, int]:
    """A story hash as the script reads it: its 8 bytes, its hash of shards, its field."""
    return h.to_bytes(8, "little"), h % SHARDS // PER_KEY, h % PER_KEY


def story_args(entries: Sequence[FeedEntry], stories: StoryHashes, shard_key
               ) -> tuple[list[str], bytes]:
    """(the shard keys the stories of ``entries`` fall in, the script's ARGV[5]): per entry
    its story hashes, each with the place of its key in the first list and its field.
    ``shard_key(i)``: the Redis key of the ``i``-th hash of shards."""
    keys: dict[int, int] = {}
    out = bytearray()
    for recs in stories.all_records(entries):
        out.append(len(recs))
        for raw, key, field in recs:
            place = keys.setdefault(key, len(keys) + 1)
            out += raw
            out += place.to_bytes(2, "little")
            out.append(field)
    return [shard_key(i) for i in keys], bytes(out)
