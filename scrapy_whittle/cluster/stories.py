"""The story memory of a cluster (``WHITTLE_DEDUP = "link"``): which stories the crawl already
has, across its sources, in Redis.

The same identity as one process's :mod:`scrapy_whittle.service.memory.story_memory`: the XXH3-64
hashes of an entry's story keys (:func:`~scrapy_whittle.feeds.story.story_keys`: its
normalised link, its id where that is a URL). The report script
(:data:`~scrapy_whittle.cluster.entries.REPORT`) looks the stories of the entries new to
their feed up, remembers them and sends the fetch's result in one atomic step: of two workers
fetching two feeds that list one story, one emits it, the other finds it a repeat (no item, no
reward for the policy: the feed is learnt to bring little). The story memory is crawl-wide
(under the crawl's own prefix, in its slot on a Redis Cluster): an entry's story keys (its
link, its id) fall in different shards, and are told known or not in one step, never shard
by shard (two workers each finding one of two shared keys known first would both take the
story for a repeat).

Layout: a story hash ``h`` lives in shard ``h mod SHARDS``; the shards are the fields of
``SHARDS / 64`` hashes (``Keys.stories``), each field the packed 8-byte hashes of its
stories (their high 48 bits: the low 16 are the shard's number, so nothing of the 64-bit
identity is lost), least recently seen first (a repeat moves its story to the recent end).
Each shard
keeps at most ``max(SHARD_MIN, ceil(2 * held / SHARDS))`` hashes, ``held`` being the
hashes every source's entry memory may hold (``Keys.entry_capacity``: the report script adds
each fetch's change of its feed's capacity, as the entry script tells it): the one-process
bound (twice the entry memory) spread over the shards, the least recently seen of a shard
forgotten first. So the memory is bounded, a story is about 6 bytes in Redis, and a lookup
scans one short string.

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
from scrapy_whittle.service.memory.entry_memory import key_hashes

#: shards of the story memory, and shards a Redis hash
SHARDS = 65536
PER_KEY = 64
#: hashes a shard may keep whatever the entry memory holds
SHARD_MIN = 8
#: bytes a story hash keeps in its shard: the hash but its low 16 bits, which are the shard's
#: number (``SHARDS`` is 2**16), so that the shard and the bytes hold all 64 bits
KEPT = 6
#: entries whose story hashes a node keeps at hand
CACHE = 1 << 16

#: the part of the report script (:data:`~scrapy_whittle.cluster.entries.REPORT`) that tells
#: repeats (``flags[j]`` '2') among the entries the entry memory found new to their feed
#: ('1'): ARGV[2] holds, per entry shown, a count byte then per story hash KEPT bytes of hash,
#: 2 of its shard key's place after KEYS[1] (the entry capacity counter), 1 of its field
STORY_LUA = f"""
local spec = ARGV[2]
if #spec > 0 then
  local offs, pos = {{}}, 1
  for i = 1, n do
    offs[i] = pos
    pos = pos + 1 + {KEPT + 3} * string.byte(spec, pos)
  end
  local held = tonumber(redis.call('GET', KEYS[1]) or '0')
  local keep = {KEPT} * math.max({SHARD_MIN}, math.ceil(2 * held / {SHARDS}))
  local shards, order = {{}}, {{}}
  local function find(s, h)
    local i = 1
    while true do
      local k = string.find(s, h, i, true)
      if not k or (k - 1) % {KEPT} == 0 then return k end
      i = k + 1
    end
  end
  for j = 1, #vis do
    if flags[j] == '1' then
      local p = offs[at[j]]
      local hs, known = {{}}, false
      for q = 0, string.byte(spec, p) - 1 do
        local r = p + 1 + {KEPT + 3} * q
        local h = string.sub(spec, r, r + {KEPT - 1})
        local ki = struct.unpack('<I2', spec, r + {KEPT})
        local f = string.byte(spec, r + {KEPT + 2})
        local id = ki * {PER_KEY} + f
        local sh = shards[id]
        if not sh then
          sh = {{KEYS[1 + ki], f, redis.call('HGET', KEYS[1 + ki], f) or ''}}
          shards[id] = sh
          order[#order + 1] = sh
        end
        hs[#hs + 1] = {{sh, h}}
        known = known or find(sh[3], h) ~= nil
      end
      if known then flags[j] = '2' end
      for _, x in ipairs(hs) do
        local sh, h = x[1], x[2]
        local k = find(sh[3], h)
        if k then sh[3] = string.sub(sh[3], 1, k - 1) .. string.sub(sh[3], k + {KEPT}) end
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
    """A node's view of the story identity: each entry's story hashes, each as (its KEPT
    bytes, the hash of shards it falls in, its field there), cached by the entry's key and
    link (a feed shows most of its entries on many fetches)."""

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
    """A story hash as the script reads it: its high KEPT bytes (the low ones tell its
    shard), its hash of shards, its field."""
    return h.to_bytes(8, "little")[8 - KEPT:], h % SHARDS // PER_KEY, h % PER_KEY


def story_args(entries: Sequence[FeedEntry], stories: StoryHashes, shard_key
               ) -> tuple[list[str], bytes]:
    """(the shard keys the stories of ``entries`` fall in, the script's ARGV[2]): per entry
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
