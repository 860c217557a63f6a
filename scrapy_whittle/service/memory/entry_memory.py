"""Which entries of each source were already seen, so that a crawl reports only new ones.

An entry is remembered by a 64-bit hash of its key (``FeedEntry.key``: id, else link, else a
digest of title and summary): XXH3-64 (the ``xxhash`` package: several times faster than
BLAKE2b, which matters at a million feeds), the same in every process, so the hashes can
be stored. Two different keys of one source collide with probability about k^2 / 2^65 for k
keys remembered (below 1e-11 for k = 10,000). XXH3 is not a cryptographic hash: a hostile feed
could craft keys that collide, which only hides that feed's own entries.

Per source the memory is a list of hashes, oldest first, in one shared pool (a source costs 16
bytes of book-keeping plus 8 bytes per hash, nothing before its first crawl). Its capacity
follows the feed: at least every entry the feed has shown at once (up to ``max_per_source``),
plus a slack of an eighth of that (at least ``min_slack``) for entries that drop out of the
feed and come back. The hashes a crawl sees are moved to the recent end (least recently seen
are forgotten first), so an entry still shown by the feed is never forgotten, and a feed with
20,000 entries does not report 19,000 of them as new at every crawl. Entries seen before a
restart and handed out again from the delivery journal (:meth:`EntryMemory.recall`) grow the
block instead: they are only part of what their fetch showed.

A feed showing more than ``max_per_source`` entries is read only up to that many (in feed
order, the same entries at every crawl); the caller counts it (``too_many_entries``).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress
from typing import Any

import numpy as np
import xxhash

from scrapy_whittle.core.columns import Col, PerSourceArrays, grown, with_room
from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.feeds.parsers.types import ParseLimits

HARD_MAX = 1_000_000

#: The pool grows by an eighth when full: at a million feeds it is most of the memory, and
#: its unused room is paid for by every source.
POOL_SPARE = 8


def key_hashes(keys: Sequence[str]) -> list[int]:
    """XXH3-64 hashes of entry keys (UTF-8), as Python ints; stable across processes."""
    h = xxhash.xxh3_64_intdigest
    try:
        return list(map(h, map(str.encode, keys)))
    except UnicodeEncodeError:         # a lone surrogate: the same bytes for other keys
        return [h(k.encode("utf-8", "surrogatepass")) for k in keys]


def entry_hashes(keys: Sequence[str]) -> np.ndarray:
    """:func:`key_hashes` as a uint64 array."""
    return np.array(key_hashes(keys), dtype=np.uint64)


class EntryMemory(PerSourceArrays):
    """Hashes of the entries seen per source (see the module docstring).

    max_per_source: hard bound on the hashes kept per source, and on the entries read from
        one crawl of a feed.
    min_slack: hashes kept beyond the most entries the feed has shown at once (at least).
    """

    per_source = {"start": Col(0, np.int64), "cap": Col(0, np.int32),
                  "size": Col(0, np.int32)}

    def __init__(self, n: int = 0, *, max_per_source: int = ParseLimits.max_entries,
                 min_slack: int = 4) -> None:
        if not 1 <= int(max_per_source) <= HARD_MAX:
            raise ValueError(f"max_per_source ({max_per_source!r}) must be in 1..{HARD_MAX}")
        if int(min_slack) < 0:
            raise ValueError(f"min_slack ({min_slack!r}) must be >= 0")
        self.max_per_source = int(max_per_source)
        self.min_slack = int(min_slack)
        self.pool = np.zeros(1024, dtype=np.uint64)
        self.last_visible = 0           # distinct entries the last new_entries() call read
        self.used = 0                   # pool[:used] is allocated
        self.live = 0                   # of which in use by some source's capacity
        #: source -> the room pushes and replays added to its block beyond the fetch rule's,
        #: given back at its next fetch (:meth:`pushed`)
        self.lent: dict[int, int] = {}
        self._init_arrays(n)

    def grow(self, n_new: int) -> None:
        self.grow_arrays(n_new)

    @property
    def n(self) -> int:
        return self.n_rows

    # -- the pool ---------------------------------------------------------------------------
    def keys(self, source: int) -> np.ndarray:
        """The hashes remembered for ``source``, oldest first (a copy)."""
        s = int(self.start[source])
        return self.pool[s:s + int(self.size[source])].copy()

    def set_keys(self, source: int, hashes: np.ndarray, capacity: int | None = None) -> None:
        """Replace the hashes of ``source`` (oldest first), keeping the newest ``capacity``
        (default: all of them); the source's block grows to that, never beyond the bound."""
        hashes = np.asarray(hashes, dtype=np.uint64)
        want = hashes.shape[0] if capacity is None else int(capacity)
        want = min(want, self.max_per_source)
        if want > int(self.cap[source]):
            self._relocate(source, want)
        keep = min(hashes.shape[0], want)
        s = int(self.start[source])
        self.pool[s:s + keep] = hashes[hashes.shape[0] - keep:]
        self.size[source] = keep

    def _relocate(self, source: int, cap: int) -> None:
        if self.used + cap > self.pool.shape[0]:
            if 2 * self.live < self.used:
                self._compact()
            self.pool = with_room(self.pool, self.used, self.used + cap, spare=POOL_SPARE)
        old, size, used = self.cap.item(source), self.size.item(source), self.used
        if size:
            s = self.start.item(source)
            self.pool[used:used + size] = self.pool[s:s + size]
        self.start[source] = used
        self.cap[source] = cap
        self.used += cap
        self.live += cap - old

    def _compact(self) -> None:
        """Move every source's block to the front of a fresh pool, in source order."""
        has = np.flatnonzero(self.cap > 0)
        caps = self.cap[has].astype(np.int64)
        starts = np.concatenate([[0], np.cumsum(caps)[:-1]]).astype(np.int64)
        pool = np.empty(grown(int(caps.sum()), spare=POOL_SPARE), dtype=np.uint64)
        for sid, new_start, cap in zip(has, starts, caps, strict=True):
            old = int(self.start[sid])
            pool[new_start:new_start + cap] = self.pool[old:old + cap]
        self.start[has] = starts
        self.pool = pool
        self.used = self.live = int(caps.sum())

    # -- what a crawl saw -------------------------------------------------------------------
    def new_entries(self, source: int, entries: Sequence[FeedEntry]) -> list[FeedEntry]:
        """The entries not seen before (first occurrence of a key inside ``entries`` too), in
        feed order; all of ``entries`` (up to ``max_per_source``) are remembered as seen. A
        fetch: it shows what the feed lists, so the room pushes and replays lent the source
        is given back, the least recently seen forgotten down to the fetch rule's size."""
        lent = self.lent.pop(source, 0) if self.lent else 0
        found = self._new_entries(source, entries)
        if lent:
            self._give_back(source, lent)
        return found

    def pushed(self, source: int, entries: Sequence[FeedEntry]) -> list[FeedEntry]:
        """:meth:`new_entries` for a hub's delivery: nothing the memory holds is forgotten for
        its entries (:meth:`recall`). A delivery may carry only the new entries (hubs of
        PubSubHubbub 0.3 send those of an RSS or Atom feed), which are no view of the feed:
        forgetting the least recently seen for them could drop entries the feed still shows
        (a feed listed oldest first shows its oldest remembered ones), and the next fetch
        would report those new a second time."""
        return self.recall(source, entries)

    def _new_entries(self, source: int, entries: Sequence[FeedEntry]) -> list[FeedEntry]:
        keys = [entry.key for entry in entries]
        if len(set(keys)) == len(keys):                # the usual case: no key twice
            distinct = entries
        else:
            first: dict[str, FeedEntry] = {}
            for entry in entries:
                first.setdefault(entry.key, entry)
            keys, distinct = list(first), list(first.values())
        if len(keys) > self.max_per_source:
            keys, distinct = keys[:self.max_per_source], distinct[:self.max_per_source]
        self.last_visible = len(keys)
        fresh = self.observe(source, key_hashes(keys))
        if False not in fresh:
            return list(distinct)
        return list(compress(distinct, fresh))

    def recall(self, source: int, entries: Sequence[FeedEntry]) -> list[FeedEntry]:
        """:meth:`new_entries` for entries seen before a restart (a journaled batch handed
        out again), except that nothing the memory holds is forgotten for them: the source's
        block grows to hold them all (up to ``max_per_source``), lent until its next fetch.
        A batch is only the new part of what a fetch showed; the feed's other entries were
        not seen again with it, so forgetting the least recently seen could drop entries the
        feed still shows (a feed listed oldest first shows its oldest remembered ones), and
        its next fetch would report them new a second time.
        """
        keys = list(dict.fromkeys(entry.key for entry in entries))[:self.max_per_source]
        hashes = key_hashes(keys)
        size = self.size.item(source)
        known = set(self.keys(source).tolist()) if size else set()
        want = min(size + sum(h not in known for h in hashes), self.max_per_source)
        cap = self.cap.item(source)
        if want > cap:
            self._relocate(source, want)
            self.lent[source] = self.lent.get(source, 0) + want - cap
        return self._new_entries(source, entries)

    def _give_back(self, source: int, lent: int) -> None:
        """The block of ``source`` loses the ``lent`` room (not below what the fetch that
        just ran needs, :meth:`_reserve`'s rule): the least recently seen go."""
        cap = self.cap.item(source)
        visible = self.last_visible
        want = min(visible + max(self.min_slack, visible // 8), self.max_per_source)
        lower = max(cap - lent, want)
        if lower >= cap:
            return
        size = self.size.item(source)
        if size > lower:
            s = self.start.item(source)
            self.pool[s:s + lower] = self.pool[s + size - lower:s + size]
            self.size[source] = lower
        self.cap[source] = lower
        self.live -= cap - lower

    def observe(self, source: int, hashes: list[int]) -> list[bool]:
        """A crawl of ``source`` showed the distinct ``hashes`` (Python ints, feed order,
        newest first); returns which were new, and remembers them all as the most recently
        seen. (Python lists and sets: for the few dozen hashes of a feed they beat numpy's
        per-call cost.) Two cases cover nearly every crawl and take a short path: a source's
        first crawl, and a feed that shows its new entries on top of those the previous crawl
        showed newest, in the same order; anything else (entries that came back, a reordered
        feed) goes through :meth:`_observe_any`, which gives the same result for those two."""
        if len(hashes) > self.max_per_source:
            hashes = hashes[:self.max_per_source]
        visible = len(hashes)
        size = self.size.item(source)
        if not size:                                    # nothing remembered: all new
            if visible:
                s, _ = self._reserve(source, visible)
                self.pool[s:s + visible] = hashes[::-1]
                self.size[source] = visible
            return [True] * visible
        s = self.start.item(source)
        old = self.pool[s:s + size].tolist()
        known = set(old)
        n_new = 0                  # the new entries on top (a sliding feed: all of them)
        for h in hashes:
            if h in known:
                break
            n_new += 1
        shown_before = visible - n_new
        if old[size - shown_before:] == hashes[:n_new - 1 if n_new else None:-1]:
            # the rest are the entries the previous crawl showed newest, in the same order
            fresh = [True] * n_new + [False] * shown_before
            if not n_new:
                return fresh       # shown already as the most recently seen: no change
            s, cap = self._reserve(source, visible)
            total = size + n_new
            if total > cap:                             # the oldest are forgotten
                drop = total - cap
                self.pool[s:s + size - drop] = self.pool[s + drop:s + size]
                size -= drop
            self.pool[s + size:s + size + n_new] = hashes[n_new - 1::-1]
            self.size[source] = size + n_new
            return fresh
        return self._observe_any(source, hashes, old, [h not in known for h in hashes])

    def _reserve(self, source: int, visible: int) -> tuple[int, int]:
        """Grow the block of ``source`` to hold ``visible`` entries plus the slack (never
        shrunk, never beyond ``max_per_source``); returns its (start, capacity)."""
        want = min(visible + max(self.min_slack, visible // 8), self.max_per_source)
        cap = self.cap.item(source)
        if want > cap:
            self._relocate(source, want)
            cap = want
        return self.start.item(source), cap

    def _observe_any(self, source: int, hashes: list[int], old: list[int],
                     fresh: list[bool]) -> list[bool]:
        """:meth:`observe` for any order: the hashes shown move to the recent end."""
        shown = set(hashes)
        kept = [h for h in old if h not in shown]
        _, cap = self._reserve(source, len(hashes))
        kept += hashes[::-1]
        self.set_keys(source, np.fromiter(kept, dtype=np.uint64, count=len(kept)),
                      capacity=cap)
        return fresh

    def seen(self, source: int) -> int:
        return int(self.size[source])

    def forget(self, source: int) -> None:
        self.size[source] = 0

    # -- persistence ------------------------------------------------------------------------
    def export_keys(self, ids) -> list[bytes]:
        """The hashes of sources ``ids`` as little-endian bytes, oldest first (for the store)."""
        pool, start, size = self.pool, self.start, self.size
        out = []
        for i in np.asarray(ids, dtype=np.int64).tolist():
            n = int(size[i])
            if n:
                s = int(start[i])
                out.append(pool[s:s + n].tobytes())
            else:
                out.append(b"")
        return out

    def import_keys(self, ids, blobs: Sequence[bytes | None]) -> None:
        """Inverse of :meth:`export_keys` (None or b"" = nothing remembered), for sources that
        hold nothing yet: one allocation and one copy for all of them."""
        ids = np.asarray(ids, dtype=np.int64)
        blobs = [b or b"" for b in blobs]
        nbytes = np.fromiter(map(len, blobs), dtype=np.int64, count=len(blobs))
        if (nbytes % 8).any():   # not all whole hashes: the bytes after the last one dropped
            blobs = [b[:len(b) - len(b) % 8] for b in blobs]
            nbytes -= nbytes % 8
        keep = nbytes > 0
        ids, lengths = ids[keep], nbytes[keep] // 8
        if not ids.size:
            return
        caps = np.minimum(lengths + np.maximum(self.min_slack, lengths // 8),
                          self.max_per_source)
        sizes = np.minimum(lengths, caps)
        starts = self.used + np.concatenate([[0], np.cumsum(caps)[:-1]])
        total = int(caps.sum())
        self.pool = with_room(self.pool, self.used, self.used + total, spare=POOL_SPARE)
        data = np.frombuffer(b"".join(blobs), dtype="<u8")      # (empty blobs add nothing)
        src_start = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        skip = lengths - sizes                     # beyond the bound: the oldest are dropped
        offs = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        self.pool[np.repeat(starts, sizes) + offs] = data[np.repeat(src_start + skip, sizes)
                                                          + offs]
        self.start[ids], self.cap[ids], self.size[ids] = starts, caps, sizes
        self.used += total
        self.live += total

    def state_dict(self) -> dict[str, Any]:
        ids = np.flatnonzero(self.size > 0)
        return {"max_per_source": self.max_per_source, "n": self.n,
                "seen": {int(i): blob.hex() for i, blob in zip(ids, self.export_keys(ids),
                                                               strict=True)}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        n = int(state.get("n", 0))
        if n > self.n:
            self.grow(n - self.n)
        for i, blob in state["seen"].items():
            if int(i) >= self.n:
                self.grow(int(i) + 1 - self.n)
            self.import_keys([int(i)], [bytes.fromhex(blob)])

    def __repr__(self) -> str:
        return f"EntryMemory(n={self.n}, max_per_source={self.max_per_source})"
