"""The child sitemaps of sitemap indexes, and their retirement once an index stops listing them.

A sitemap index's children (on its own host) become sources: the spider registers the URLs of
``ParsedFeed.sources``. Sites rotate their daily news sitemaps through their index, so a child
the index no longer lists must not stay a source for ever. Each fetch of an index tells which
children it lists (:meth:`IndexChildren.listed`; a 304 lists what the previous answer did:
:meth:`IndexChildren.unchanged`), and each child remembers the index that listed it last,
the index's fetches in a row that have not listed it since (its *misses*) and when it was
last listed. A child not listed for ``WHITTLE_SITEMAP_CHILD_MISSES`` fetches of its index, or
last listed more than ``WHITTLE_SITEMAP_CHILD_MAX_AGE`` seconds before one, retires the way
a silent source does (:meth:`Retirement.unlisted`: left out of the policy's choice, probed
rarely, what was learned of it kept; stat ``sources/unlisted``); listed again, it comes back
(``sources/relisted``). A child listed for the first time is the index's own news: the index
is alive then, as a feed is with a new entry (it never retires as silent while it names new
children, and a retired index naming one is back). It retires once for being unlisted: a
probe that finds it alive brings it back (``sources/revived``), and only a new listing and a
new run of misses retire it again for this.

A listing read only in part (an index with more children than ``WHITTLE_MAX_FEED_ENTRIES``,
or broken XML) counts no miss: the children it lacks may be in the part not read. A source
on the ``WHITTLE_SOURCES`` list is never retired this way. A child listed before the spider
registered it (its registration comes after the index's answer) is remembered by URL until
it is registered or the index's next listing.

Both outlive a restart: each index's last listing (whether it was read in part, when, the
children it named that are not registered yet) is a row of its own beside the children's
(:meth:`IndexChildren.index_rows`), checkpointed after each listing. The children still
awaiting their registration at a restore are registered by the service as it opens (the
spider would have; the index's next answer may be a 304 that names nobody).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.sources.retirement import Retirement
from scrapy_whittle.service.sources.source_table import SourceTable
from scrapy_whittle.service.types import Stats

#: the misses a child's row counts, at most (a child gone for years keeps a small number)
MISSES_CAP = 1 << 30


class Listing(NamedTuple):
    """What a fetch of a sitemap index listed: its child sitemaps' URLs, and whether the
    index was read whole (``complete``; False: more children than the entry cap, or broken
    XML, so the children it lacks may be in the part not read)."""

    urls: tuple[str, ...]
    complete: bool = True


@dataclass
class Child:
    """One child sitemap: the index that listed it last (``parent``), that index's fetches in
    a row that have not listed it since, when it was last listed, whether it retired for
    not being listed (and has not been listed again since)."""

    parent: int
    misses: int
    listed_at: float
    dropped: bool = False

    def row(self, child: int) -> tuple[int, int, int, float, int]:
        return child, self.parent, self.misses, self.listed_at, int(self.dropped)


#: an index's last listing as stored: (index, read in part (0/1), when it was listed, the
#: URLs it named that are not registered yet)
IndexRow = tuple[int, int, float, tuple[str, ...]]


class IndexChildren:
    """The children of the sitemap indexes (see the module docstring); ``touch(ids)`` marks
    sources whose book-keeping the next checkpoint writes."""

    def __init__(self, config: WhittleConfig, *, sources: SourceTable, retirement: Retirement,
                 stats: Stats, touch: Callable[[list[int]], None]) -> None:
        self.config = config
        self.sources = sources
        self.retirement = retirement
        self.stats = stats
        self.touch = touch
        self.children: dict[int, Child] = {}
        self.by_parent: dict[int, set[int]] = {}
        #: URL -> (index, when listed) of children listed but not registered yet
        self.awaiting: dict[str, tuple[int, float]] = {}
        self._awaiting_of: dict[int, list[str]] = {}
        #: indexes whose last listing was read only in part (a 304 repeats it: no miss)
        self._partial: set[int] = set()
        #: when each index's last listing was read
        self._listing_at: dict[int, float] = {}
        self.changed: set[int] = set()
        #: indexes listed since the last checkpoint (their rows: :meth:`index_rows`)
        self.changed_indexes: set[int] = set()

    # -- what an index's fetch showed ------------------------------------------------------
    def listed(self, parent: int, urls: Iterable[str], now: float, *,
               complete: bool = True) -> None:
        """A fetch of index ``parent`` listed the children ``urls`` (``complete``: the whole
        index was read)."""
        for url in self._awaiting_of.pop(parent, ()):
            if self.awaiting.get(url, (None,))[0] == parent:
                del self.awaiting[url]
        self._listing_at[parent] = now
        self.changed_indexes.add(parent)
        shown: set[int] = set()
        waiting = []
        id_of = self.sources.id_of
        before = self.by_parent.get(parent, set())
        fresh = False
        for url in urls:
            sid = id_of(url)
            if sid is None:
                self.awaiting[url] = (parent, now)
                waiting.append(url)
            elif sid != parent:
                shown.add(sid)
                fresh = fresh or sid not in before
                self._listed(sid, parent, now)
        if waiting:
            self._awaiting_of[parent] = waiting
        if waiting or fresh:
            # an index has no entries of its own: a child it lists for the first time is its
            # news, so it is not silent (else it would retire as silent and its children be
            # looked at only at its rare probes)
            if self.retirement.alive(parent, self.sources.url(parent), now):
                self.touch([parent])
        if complete:
            self._partial.discard(parent)
            for sid in self.by_parent.get(parent, set()) - shown:
                self._missed(sid, now)
        else:
            self._partial.add(parent)

    def unchanged(self, parent: int, now: float) -> None:
        """Index ``parent`` answered 304: it lists what its previous answer did."""
        mine = self.by_parent.get(parent)
        if not mine or parent in self._partial:
            return
        for sid in list(mine):
            child = self.children[sid]
            if child.misses:
                self._missed(sid, now)
            else:
                child.listed_at = now
                self.changed.add(sid)

    def registered(self, sid: int, url: str) -> None:
        """Source ``sid`` was just registered at ``url``: a child listed before is one now."""
        found = self.awaiting.pop(url, None)
        if found is not None:
            self._listed(sid, found[0], found[1])

    def _listed(self, sid: int, parent: int, now: float) -> None:
        child = self.children.get(sid)
        if child is None:
            self.children[sid] = Child(parent, 0, now)
            self.by_parent.setdefault(parent, set()).add(sid)
        else:
            if child.parent != parent:           # another index lists it now
                self.by_parent[child.parent].discard(sid)
                self.by_parent.setdefault(parent, set()).add(sid)
                child.parent = parent
            if child.dropped:
                child.dropped = False
                if self.retirement.relisted(sid, self.sources.url(sid), now):
                    self.touch([sid])
            child.misses, child.listed_at = 0, now
        self.changed.add(sid)

    def _missed(self, sid: int, now: float) -> None:
        child = self.children[sid]
        child.misses = min(child.misses + 1, MISSES_CAP)
        self.changed.add(sid)
        if child.dropped or self.sources.listed.item(sid):
            return
        misses, max_age = self.config.sitemap_child_misses, self.config.sitemap_child_max_age
        age = now - child.listed_at
        if (misses and child.misses >= misses) or (max_age and age >= max_age):
            child.dropped = True
            cause = (f"its sitemap index {self.sources.url(child.parent)} has not listed it "
                     f"in its last {child.misses} fetches, nor for {age / 86400.0:.3g} days")
            if self.retirement.unlisted(sid, self.sources.url(sid), cause, now):
                self.touch([sid])

    # -- persistence ---------------------------------------------------------------------------
    def drain(self) -> list[tuple[int, int, int, float, int]]:
        """The rows of the children changed since the last call (for a checkpoint)."""
        changed, self.changed = self.changed, set()
        return [self.children[sid].row(sid) for sid in sorted(changed)]

    def index_rows(self, parents: Iterable[int]) -> list[IndexRow]:
        """The rows of indexes ``parents`` (see :data:`IndexRow`): a row is the index's last
        listing, written when the index is listed, not at each registration (a restore
        skips the URLs registered since, and links those registered without their child's
        row: a Redis Cluster's checkpoint cut short between two tags' transactions)."""
        return [(parent, int(parent in self._partial), self._listing_at.get(parent, 0.0),
                 tuple(self._awaiting_of.get(parent, ()))) for parent in parents]

    def drain_indexes(self) -> list[IndexRow]:
        """The rows of the indexes changed since the last call (for a checkpoint)."""
        changed, self.changed_indexes = self.changed_indexes, set()
        return self.index_rows(sorted(changed))

    def load(self, rows: Iterable[tuple], indexes: Iterable[IndexRow] = ()) -> None:
        """The children and the indexes' last listings as stored (a restore); rows naming
        unknown sources are skipped. Of the URLs a listing named that were not sources then,
        those that are not yet await their registration, and those that are and are no
        index's child become the child of the index that named them last. What was known
        before is forgotten (a cluster's standby reads them again as it takes over: they
        are not followed)."""
        self.children.clear()
        self.by_parent.clear()
        self.changed.clear()
        self.awaiting.clear()
        self._awaiting_of.clear()
        self._partial.clear()
        self._listing_at.clear()
        self.changed_indexes.clear()
        n = len(self.sources)
        for sid, parent, misses, listed_at, dropped in rows:
            if 0 <= sid < n and 0 <= parent < n:
                self.children[int(sid)] = Child(int(parent), int(misses), float(listed_at),
                                                bool(dropped))
                self.by_parent.setdefault(int(parent), set()).add(int(sid))
        id_of = self.sources.id_of
        unlinked: dict[int, tuple[int, float]] = {}
        # in the order of the listings: a URL two indexes named is the later one's
        for parent, partial, listed_at, waiting in sorted(indexes, key=lambda r: r[2]):
            if not 0 <= parent < n:
                continue
            parent, listed_at = int(parent), float(listed_at)
            self._listing_at[parent] = listed_at
            if partial:
                self._partial.add(parent)
            mine = []
            for url in waiting:
                sid = id_of(url)
                if sid is None:
                    mine.append(url)
                    self.awaiting[url] = (parent, listed_at)
                elif sid not in self.children and sid != parent:
                    unlinked[sid] = (parent, listed_at)
            if mine:
                self._awaiting_of[parent] = mine
        for sid, (parent, listed_at) in unlinked.items():
            self._listed(sid, parent, listed_at)
