"""Which stories the crawl already has, across its sources (``WHITTLE_DEDUP = "link"``).

A story is known by the XXH3-64 hashes of its story keys (:mod:`scrapy_whittle.feeds.story`:
the normalised link, and the id where it is a URL). An entry new to its feed (the per-source
:class:`~scrapy_whittle.service.memory.entry_memory.EntryMemory` decides that first) whose story is
known already, from another feed or from an earlier entry of the same feed under another id,
is a *repeat*: it makes no item, it is worth nothing to the policy (so a feed that mostly
repeats others is learnt to bring little), and the source it was seen in is recorded
(:meth:`StoryMemory.drain`: the store's ``story_sources``). An entry without a story key is
never a repeat.

Only entries new to their feed are looked at (a feed's old entries were looked at when they
were new), so a crawl costs the normalisation of its new entries alone; where each has one
story key in its normal form (:func:`~scrapy_whittle.feeds.story.story_key_column`) and
every story is new, the crawl's hashes are looked up and added at once. The memory is a
Python dict, hash -> the source that brought the story first, least recently seen first: a
repeat moves its story to the recent end, and beyond the bound the least recently seen are
forgotten, an eighth of the capacity at once. The bound follows the entry memory: twice the
hashes all sources may remember (two keys a story at most), at least ``min_capacity``; so a
story (most have one key) is remembered at least as long as the feeds that showed it
remember their own entries, unless many new stories arrive at once. A dict entry costs
about 100 bytes (the entry memory 8 a hash): at 10^6 feeds of 20 entries this is the larger
part of the crawl's memory.

The checkpoint writes what changed (:meth:`drain`); a restore reads the stories back in
their order (:meth:`load`). A crawl without a store keeps no changes (``track_changes``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import islice, repeat

from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.feeds.story import ParamFilter, story_key_column, story_keys
from scrapy_whittle.service.memory.entry_memory import key_hashes

MIN_CAPACITY = 4096
#: beyond its capacity the memory forgets this share of it at once, least recently seen first
FORGET_SHARE = 8
_SIGN = 1 << 63
_WRAP = 1 << 64


def to_signed(h: int) -> int:
    """A uint64 hash as SQLite's signed 64-bit integer."""
    return h - _WRAP if h >= _SIGN else h


def from_signed(h: int) -> int:
    return h + _WRAP if h < 0 else h


class StoryMemory:
    """The stories seen (see the module docstring). ``bound()`` gives the hashes the
    entry memory may hold now; ``params`` the query parameters a link's key drops."""

    def __init__(self, params: ParamFilter, bound: Callable[[], int] = lambda: 0, *,
                 min_capacity: int = MIN_CAPACITY) -> None:
        self.params = params
        self.bound = bound
        self.min_capacity = int(min_capacity)
        self.stories: dict[int, int] = {}      # hash -> first source, least recent first
        self.seq = 0                           # the order of the last story moved or added
        self.changed: dict[int, int] = {}      # hash -> seq, since the last checkpoint
        self.gone: set[int] = set()            # forgotten since the last checkpoint
        self.sightings: set[tuple[int, int]] = set()   # (hash, source) repeats, ditto
        #: whether what changed is kept for :meth:`drain` (a crawl without a store: no)
        self.track_changes = True

    def __len__(self) -> int:
        return len(self.stories)

    @property
    def capacity(self) -> int:
        return max(self.min_capacity, 2 * int(self.bound()))

    def split(self, source: int, entries: Sequence[FeedEntry]) -> tuple[list[FeedEntry], int]:
        """``entries`` new to ``source``'s feed, in feed order: (those that are new stories
        or have no story key, how many are repeats). All are remembered as stories."""
        stories = self.stories
        column = story_key_column(entries)
        if column is not None:
            hashes = key_hashes(column)
            if stories.keys().isdisjoint(hashes):
                # the usual crawl: one key an entry, every story new: what the loop below
                # does, at once, unless two entries share a story (then undone, and the loop)
                size = len(stories)
                stories.update(zip(hashes, repeat(source)))
                if len(stories) - size == len(hashes):
                    if self.track_changes:
                        seq, self.seq = self.seq, self.seq + len(hashes)
                        self.changed.update(zip(hashes, range(seq + 1, self.seq + 1),
                                                strict=True))
                    self._forget()
                    return list(entries), 0
                for h in hashes:
                    stories.pop(h, None)
            keyed = [[h] for h in hashes]
        else:
            params = self.params
            keyed = [key_hashes(story_keys(entry, params)) for entry in entries]
        fresh: list[FeedEntry] = []
        repeats = 0
        track = self.track_changes
        changed = self.changed
        for entry, hashes in zip(entries, keyed, strict=True):
            if not hashes:
                fresh.append(entry)
                continue
            known = [h for h in hashes if h in stories]
            if known:
                repeats += 1
                if track:
                    self.sightings.add((known[0], source))
                first = stories[known[0]]
            else:
                fresh.append(entry)
                first = source
            for h in hashes:
                stories.pop(h, None)
                stories[h] = first
                if track:
                    self.seq += 1
                    changed[h] = self.seq
        self._forget()
        return fresh, repeats

    def _forget(self) -> None:
        capacity = self.capacity
        excess = len(self.stories) - capacity
        if excess <= 0:
            return
        stories, changed, gone = self.stories, self.changed, self.gone
        # an eighth of the capacity at once: a dict keeps the holes of its deleted entries
        # until it grows, and each walk from its oldest end passes them all, so forgetting
        # a story or two per crawl would cost a crawl more the longer the crawl ran
        old = list(islice(stories, max(excess, capacity // FORGET_SHARE)))
        for h in old:
            del stories[h]
        if self.track_changes:
            for h in old:
                changed.pop(h, None)
                gone.add(h)

    # -- persistence ------------------------------------------------------------------------
    def drain(self) -> tuple[list[tuple], list[tuple], list[tuple]]:
        """What changed since the last call, as store rows: (stories (hash, source, seq)
        added or moved, (hash,) of the stories forgotten, (hash, source) of the repeats
        seen); the memory starts counting again."""
        stories = self.stories
        rows = [(to_signed(h), stories[h], seq) for h, seq in self.changed.items()]
        gone = [(to_signed(h),) for h in self.gone if h not in stories]
        seen = [(to_signed(h), s) for h, s in self.sightings if h in stories]
        self.changed, self.gone, self.sightings = {}, set(), set()
        return rows, gone, seen

    def load(self, rows: Iterable[tuple[int, int, int]]) -> None:
        """The stored stories (hash, source, seq), in any order."""
        ordered = sorted(rows, key=lambda r: r[2])
        self.stories = {from_signed(h): int(s) for h, s, _ in ordered}
        self.seq = max((int(r[2]) for r in ordered), default=0)
        self.changed, self.gone, self.sightings = {}, set(), set()

    def __repr__(self) -> str:
        return f"StoryMemory({len(self.stories)} hashes, capacity {self.capacity})"
