"""The crawl's sources coming and going: registered (from the store, a list, a spider, a
sitemap index, a site's search), leaving and rejoining the source list, a site's address
giving way to its feeds, a source moved or merged into another by permanent redirects.

A :class:`SourceRoster` changes the source table
(:class:`~scrapy_whittle.service.sources.source_table.SourceTable`) and tells the parts of the
re-crawl service that keep per-source state: they grow with it, the epoch's planner
discovers the sources that join and drops those that leave, the next checkpoint writes what
changed.
"""

from __future__ import annotations

import logging

import numpy as np

from scrapy_whittle.service.decisions.epochs import Timeline
from scrapy_whittle.service.decisions.outcomes import CrawlOutcomes
from scrapy_whittle.service.decisions.planning import EpochPlanner
from scrapy_whittle.service.decisions.policy_keeper import PolicyKeeper
from scrapy_whittle.service.memory.entry_memory import EntryMemory
from scrapy_whittle.service.once_log import OnceLog
from scrapy_whittle.service.sources.index_children import IndexChildren
from scrapy_whittle.service.sources.registry import SourceSpec
from scrapy_whittle.service.sources.source_state import SourceState
from scrapy_whittle.service.sources.source_table import SourceTable
from scrapy_whittle.service.sources.websub import Subscriptions
from scrapy_whittle.service.state.persistence import StatePersistence
from scrapy_whittle.service.state.storage import SavedState, StoreError
from scrapy_whittle.service.types import Crawl, Stats

logger = logging.getLogger(__name__)


class SourceRoster:
    """The sources of one re-crawl service, and the parts told of their changes."""

    def __init__(self, *, sources: SourceTable, state: SourceState, memory: EntryMemory,
                 outcomes: CrawlOutcomes, keeper: PolicyKeeper, planner: EpochPlanner,
                 children: IndexChildren, persistence: StatePersistence,
                 timeline: Timeline, stats: Stats, log_once: OnceLog,
                 websub: Subscriptions | None) -> None:
        self.sources = sources
        self.state = state
        self.memory = memory
        self.outcomes = outcomes
        self.keeper = keeper
        self.planner = planner
        self.children = children
        self.persistence = persistence
        self.timeline = timeline
        self.stats = stats
        self.websub = websub
        self._log_once = log_once

    def _now(self) -> float:
        return self.timeline.clock.now()

    def add_sources(self, specs: list[SourceSpec]) -> list[int]:
        """Register sources (a URL already known keeps its id); the policy learns of new ones
        at the next selection."""
        sids = self.register(specs)
        self.stats.set("sources", len(self.sources) - self.sources.n_left)
        return sids

    def sync_sources(self, specs: list[SourceSpec]) -> tuple[int, int]:
        """The source list (``WHITTLE_SOURCES``) is now ``specs``: new sources join, those
        listed before and missing now leave (their state is kept, they are not crawled),
        those that had left and are back rejoin. Returns (joined, left) counts."""
        before = len(self.sources)
        ids = self.register(list(specs))
        if self.keeper.policy is not None:
            self.keeper.grow()
        back, leaving = self.sync_list(ids)
        if back.size and self.keeper.policy is not None:
            self.planner.discover(back, self._now())
        joined = len(self.sources) - before + len(back)
        self.stats.set("sources", len(self.sources) - self.sources.n_left)
        return joined, len(leaving)

    def site_page(self, crawl: Crawl) -> bool | None:
        """The fetch of ``crawl`` found a web page, not a feed. At a source that never gave a
        feed the address is a site's, searched for its feeds
        (:mod:`scrapy_whittle.scrapy.site_search`), which take its place (:meth:`site_feeds`):
        the fetch teaches nothing (a failed crawl to the policy, no error counted) and the
        source leaves the crawl (never fetched as a feed again; its record kept). Returns
        whether it was on the source list; None, and nothing done, at a source that gave a
        feed before: a feed that serves a page (a maintenance or challenge page) is a failing
        feed, to report as such."""
        sid = crawl.source
        st = self.state
        if np.isfinite(st.last_ok.item(sid)) or st.new_items.item(sid):
            return None
        listed = bool(self.sources.listed[sid])
        self.outcomes.not_a_feed(crawl)
        # no back-off: a crawl killed before the search ended finds the site on its list
        # again at the restart, to be fetched and searched at once (not a back-off later);
        # its failure stays, which tells the restore it never gave a feed
        self.sources.retry_at[sid] = 0.0
        self._relist([], [sid], listed=False)
        return listed

    def site_feeds(self, specs: list[SourceSpec], dropped: list[str] = (), *,
                   listed: bool = True) -> list[int]:
        """A site's feeds: ``specs`` join the crawl as sources (on the source list with
        ``listed``, as the site's address was), ``dropped`` (URLs of feeds the site had and
        names no more) leave it. Returns the ids of ``specs``."""
        sids = self.register(list(specs))
        if self.keeper.policy is not None:
            self.keeper.grow()
        gone = [sid for sid in map(self.sources.id_of, dropped) if sid is not None]
        self._relist(sids, gone, listed=listed)
        return sids

    def sources_dead(self, urls: list[str]) -> tuple[bool, bool]:
        """(whether every source of ``urls`` this crawl knows is dead: retired or merged
        into another, whether any is on the source list); (True, True) when it knows none."""
        ids = np.asarray([i for i in map(self.sources.id_of, urls) if i is not None],
                         dtype=np.int64)
        if not ids.size:
            return True, True
        src = self.sources
        return bool(np.all(src.retired[ids] | src.merged[ids])), bool(np.any(src.listed[ids]))

    def _relist(self, joining: list[int], leaving: list[int], *, listed: bool) -> None:
        back, gone, changed = self.sources.relist(joining, leaving, listed=listed)
        self.state.touch(changed)
        if gone.size:
            self.planner.drop_left()
            self.stats.inc("sources/left", int(gone.size))
        if back.size:
            self.stats.inc("sources/rejoined", int(back.size))
            if self.keeper.policy is not None:
                self.planner.discover(back, self._now())
        self.stats.set("sources", len(self.sources) - self.sources.n_left)

    def sync_list(self, ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
        back, leaving, changed = self.sources.sync_list(ids)
        self.state.touch(changed)
        if back.size or leaving.size:
            self.planner.drop_left()
            logger.info("source list: %d sources rejoined, %d left it (not crawled any more; "
                        "what was learned of them is kept)", back.size, leaving.size)
            self.stats.inc("sources/left", int(leaving.size))
            self.stats.inc("sources/rejoined", int(back.size))
            if self.websub is not None:
                for sid in leaving.tolist():
                    self.websub.source_left(sid, self._now())
        return back, leaving

    def register(self, specs: list[SourceSpec], discover: bool = True) -> list[int]:
        sids, new = self.sources.add(specs)
        if new:
            self.grow_parts(new)
            if discover and self.keeper.policy is not None:  # at an opening, all at once
                self.planner.discover(new, self._now())
            if self.children.awaiting:         # a sitemap index listed them first
                for sid in new:
                    self.children.registered(sid, self.sources.url(sid))
            if self.persistence.store is not None:    # what the next checkpoint must insert
                by_id = dict(zip(sids, specs, strict=True))
                self.persistence.sources_added((sid, by_id[sid]) for sid in new)
                self.state.touch(new)
        return sids

    def grow_parts(self, new: list[int]) -> None:
        """The rest of the service's per-source state follows the source table."""
        if not new:
            return
        self.memory.grow(len(new))
        self.state.grow(len(new))
        self.outcomes.grow(len(new))
        self.keeper.sources_added(new)

    def moved(self, crawl: Crawl, url: str) -> Crawl:
        """The fetch of ``crawl`` was redirected permanently (301, 308) to ``url``: the source
        is at ``url`` from now on, its old URLs kept as aliases (a list that still names one
        finds it: no twin). When ``url`` is another source's already, the two are one: the
        moved source merges into that one (its URLs become that one's aliases; it is crawled
        no more, what was learned of it is kept) and the fetch counts as that one's. Returns
        the crawl the fetch's outcome is to be reported as. Counted under ``sources/moved``
        (and ``sources/merged``), logged once per source."""
        sid, src = crawl.source, self.sources
        old = src.url(sid)
        if url == old:
            return crawl
        target = src.move(sid, url)
        aliases = [(u, i) for u, i in src.registry.aliases.items() if i == target]
        self.persistence.source_moved(sid, url if target == sid else None, aliases)
        self.state.touch([sid, target])
        self.stats.inc("sources/moved")
        if target == sid:
            self._log_once(sid, "moved", url, f"moved permanently from {old}",
                           logging.INFO)
            return crawl._replace(url=url)
        self.stats.inc("sources/merged")
        self._log_once(sid, "moved", old, f"moved permanently to {url}, which is source "
                       f"{target}: merged into it", logging.INFO)
        self.planner.drop_left()
        src.in_flight.pop(sid, None)
        self.stats.set("sources", len(src) - src.n_left)
        return crawl._replace(source=target, url=url)

    def register_stored(self, saved: SavedState | None) -> None:
        """The sources of the store, under their ids, and their old URLs (aliases)."""
        if saved is None:
            return
        cols = saved.sources
        if list(cols["id"]) != list(range(saved.n_sources)):
            raise StoreError(f"{self.persistence.store.path}: source ids are not 0..n-1")
        self.grow_parts(self.sources.add_columns(
            list(cols["url"]), cols["weight"], cols["min_interval"],
            [c or "" for c in cols["category"]])[1])
        for url, sid in saved.aliases:      # before the list: an old URL finds its source
            if 0 <= sid < saved.n_sources:
                self.sources.registry.add_alias(url, sid)
