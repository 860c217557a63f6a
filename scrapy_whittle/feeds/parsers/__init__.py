"""Feed parsers behind one adapter: each turns prepared bytes into feedparser-shaped entries
(:class:`~scrapy_whittle.feeds.parsers.types.RawFeed`), and
:func:`scrapy_whittle.feeds.parse.parse_feed` turns those into the project's
:class:`FeedEntry`. Which one runs is ``WHITTLE_FEED_PARSER``.

* ``feedparser-rs`` (default): 0.9 ms for a 43 KB, 50-entry feed; what it refuses (no
  entries and no feed version found) is handed to feedparser.
* ``feedparser``: the Universal Feed Parser, 23-28 ms for the same feed; the reference.

The differences between them, measured on ``tests/data/feeds/``, are in ``docs/parsing.md``.
"""

from __future__ import annotations

from types import ModuleType

from scrapy_whittle.feeds.parsers import rust, universal
from scrapy_whittle.feeds.parsers.types import (
    FEED_ERROR_KINDS,
    MAX_BYTES,
    NOTICE_KINDS,
    FeedEntry,
    FeedError,
    ParsedFeed,
    ParseLimits,
    RawFeed,
)

PARSERS: dict[str, ModuleType] = {rust.NAME: rust, universal.NAME: universal}
DEFAULT_PARSER = rust.NAME
FALLBACK_PARSER = universal.NAME


def get_parser(name: str) -> ModuleType:
    """The adapter module called ``name``; ValueError naming the choices (or what is missing)."""
    try:
        module = PARSERS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown feed parser {name!r}; choose one of "
                         f"{', '.join(sorted(PARSERS))}") from None
    missing = module.available()
    if missing:
        raise ValueError(missing)
    return module


__all__ = [
    "DEFAULT_PARSER", "FALLBACK_PARSER", "FEED_ERROR_KINDS", "MAX_BYTES", "NOTICE_KINDS",
    "PARSERS", "FeedEntry", "FeedError", "ParseLimits", "ParsedFeed", "RawFeed", "get_parser",
]
