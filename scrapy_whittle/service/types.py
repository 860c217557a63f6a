"""The small types the re-crawl service shares with its callers: the stats sink, the hosts'
load, a crawl handed out, what a fetch found (what Scrapy's scheduler and middleware call on
the local service or on a cluster's node alike: :mod:`scrapy_whittle.service.sink`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple, Protocol

from scrapy_whittle.core import sanitize
from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.service.config import WhittleConfig

#: seconds a crawl result may wait before the policy learns it
FLUSH_AFTER = 0.25


class Stats(Protocol):
    def inc(self, key: str, count: float = 1) -> None: ...

    def set(self, key: str, value: Any) -> None: ...

    def get(self, key: str, default: Any = 0) -> Any: ...


class HostLoad(Protocol):
    """Which hosts cannot take another request now (Scrapy: a saturated download slot)."""

    def saturated(self, host: str) -> bool: ...

    def all_saturated(self) -> Iterable[str]: ...


class NoLoad:
    """Every host can take a request (the service without a downloader)."""

    def saturated(self, host: str) -> bool:
        return False

    def all_saturated(self) -> Iterable[str]:
        return ()


NO_LOAD = NoLoad()


class DictStats:
    """Stats in a plain dict (the service without Scrapy)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def inc(self, key: str, count: float = 1) -> None:
        self.values[key] = self.values.get(key, 0) + count

    def set(self, key: str, value: Any) -> None:
        self.values[key] = value

    def get(self, key: str, default: Any = 0) -> Any:
        return self.values.get(key, default)


class PrefixedStats:
    """Stats under a prefix of another sink's (a cluster's planner beside its worker)."""

    def __init__(self, stats: Stats, prefix: str) -> None:
        self.stats, self.prefix = stats, prefix

    def inc(self, key: str, count: float = 1) -> None:
        self.stats.inc(self.prefix + key, count)

    def set(self, key: str, value: Any) -> None:
        self.stats.set(self.prefix + key, value)

    def get(self, key: str, default: Any = 0) -> Any:
        return self.stats.get(self.prefix + key, default)


class Crawl(NamedTuple):
    """One fetch of a source, as handed to the downloader (a tuple: cheap to make). ``cid``
    and ``weight``: a cluster's crawl id and the source's weight, carried with the task."""

    source: int
    url: str
    epoch: int
    sent_at: float
    headers: dict[str, str]
    cid: str = ""
    weight: float = 1.0


class FetchResult(NamedTuple):
    """The new entries a fetch found, their values at capture, and whether every entry
    the feed showed was new (older new ones may have been lost); ``batch``: their batch in
    the delivery journal (None without one: :mod:`scrapy_whittle.service.state.deliveries`)."""

    entries: list[FeedEntry]
    values: list[float]
    window_full: bool
    batch: int | None = None


def valued(entries: list[FeedEntry], weight: float, config: WhittleConfig
           ) -> tuple[list[float], int]:
    """(The value of new entries at capture, how many of them were clipped): engagement /
    ``WHITTLE_ENGAGEMENT_SCALE`` when the feed shows one, else ``WHITTLE_ITEM_VALUE`` x the
    source's weight; each within the plausible range of :mod:`scrapy_whittle.core.sanitize`."""
    return sanitize.entry_values([e.engagement for e in entries], weight * config.item_value,
                                 config.engagement_scale)
