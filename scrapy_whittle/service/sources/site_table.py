"""The sites a crawl searched and the feeds it found on each, kept across restarts.

A source list may name a site's address instead of a feed's (:mod:`scrapy_whittle.scrapy.
site_search` tells them apart by what the address serves). Once a site is searched, its
feeds stand for it: :meth:`SiteTable.expand` puts them in the site's place each time a list
is read, so a restarted crawl (or a list read again) crawls the feeds and never fetches the
site's page again. A site found without feeds is kept too, and left out of the list until it
is due to be searched again (it may have gained one since).

With ``JOBDIR`` the table lives in ``JOBDIR/whittle-sites.sqlite``, one row per site (its
address, when it was searched, its feeds as a JSON list of ``[url, title]``), written as soon
as a search ends and before its feeds join the crawl: a crawl killed at any moment finds on
restart either the site (searched again) or the site and all its feeds. (A file of its own
rather than a table of ``whittle.sqlite``: those rows are written at once, off the checkpoints
that write the state store in a thread.)
"""

from __future__ import annotations

import json
import logging
import math
import sqlite3
from pathlib import Path
from typing import NamedTuple

from scrapy_whittle.feeds.finder import FoundFeed
from scrapy_whittle.service.sources.registry import SourceSpec

logger = logging.getLogger(__name__)

FILE_NAME = "whittle-sites.sqlite"

SCHEMA = ("CREATE TABLE IF NOT EXISTS sites (site TEXT PRIMARY KEY, searched_at REAL NOT NULL, "
          "feeds TEXT NOT NULL) WITHOUT ROWID")


class SiteRecord(NamedTuple):
    """What a search of a site found, and when (unix seconds of the crawl's clock)."""

    feeds: tuple[FoundFeed, ...]
    searched_at: float


class SiteTable:
    """Site address -> :class:`SiteRecord`; ``path``: the SQLite file (None: memory only)."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self.sites: dict[str, SiteRecord] = {}
        self._site_of: dict[str, str] = {}          # feed URL -> its site
        self._db: sqlite3.Connection | None = None

    @classmethod
    def in_jobdir(cls, jobdir: str | Path) -> SiteTable:
        return cls(Path(jobdir) / FILE_NAME)

    def __len__(self) -> int:
        return len(self.sites)

    # -- the file -----------------------------------------------------------------------------
    def load(self) -> None:
        """Read the sites the file holds (none when it does not exist). A file that cannot be
        read is logged and ignored: its sites are searched again."""
        if self.path is None or not self.path.exists():
            return
        try:
            rows = self._connect().execute("SELECT site, searched_at, feeds FROM sites"
                                           ).fetchall()
            loaded = {site: SiteRecord(tuple(FoundFeed(*f) for f in json.loads(feeds)),
                                       float(at)) for site, at, feeds in rows}
        except (sqlite3.Error, ValueError, TypeError) as exc:
            logger.error("%s cannot be read (%s): the sites of the source list are searched "
                         "again", self.path, exc)
            self.close()
            return
        for site, record in loaded.items():
            self._set(site, record)

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = sqlite3.connect(self.path, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(SCHEMA)
        return self._db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    # -- what searches found ------------------------------------------------------------------
    def _set(self, site: str, record: SiteRecord) -> None:
        old = self.sites.get(site)
        if old is not None:
            for feed in old.feeds:
                self._site_of.pop(feed.url, None)
        self.sites[site] = record
        for feed in record.feeds:
            self._site_of.setdefault(feed.url, site)

    def record(self, site: str, feeds: list[FoundFeed], now: float) -> list[str]:
        """A search of ``site`` at ``now`` found ``feeds`` (none, maybe): written at once.
        Returns the URLs of the feeds it had before and has no more."""
        old = self.sites.get(site)
        kept = {f.url for f in feeds}
        dropped = [f.url for f in old.feeds if f.url not in kept] if old is not None else []
        record = SiteRecord(tuple(feeds), float(now))
        if self.path is not None:
            db = self._connect()
            with db:
                db.execute("INSERT OR REPLACE INTO sites VALUES (?, ?, ?)",
                           (site, record.searched_at,
                            json.dumps([list(f) for f in record.feeds])))
        self._set(site, record)
        return dropped

    def get(self, site: str) -> SiteRecord | None:
        return self.sites.get(site)

    def site_of(self, feed_url: str) -> str | None:
        """The site a feed was found on, or None."""
        return self._site_of.get(feed_url)

    def expand(self, specs: list[SourceSpec], again_before: float = -math.inf
               ) -> list[SourceSpec]:
        """``specs`` with each searched site replaced by its feeds (they keep the site's
        weight, minimum interval and category; a feed's title is its own, else the site's). A
        site found without feeds is left out, unless it was searched before ``again_before``:
        then it stays, to be searched again."""
        if not self.sites:
            return specs
        out: list[SourceSpec] = []
        for spec in specs:
            record = self.sites.get(spec.url)
            if record is None or (not record.feeds and record.searched_at < again_before):
                out.append(spec)
                continue
            out.extend(SourceSpec(url=f.url, title=f.title or spec.title, weight=spec.weight,
                                  min_interval=spec.min_interval, category=spec.category)
                       for f in record.feeds)
        return out
