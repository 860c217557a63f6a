"""Feed parsers behind one adapter: each turns prepared bytes into feedparser-shaped entries
(:class:`~scrapy_whittle.feeds.parsers.types.RawFeed`), and
:func:`scrapy_whittle.feeds.parse.parse_feed` turns those into the project's
:class:`FeedEntry`. Which one runs is ``WHITTLE_FEED_PARSER``.

* ``feedparser-rs`` (default): the fast one (compiled); what it refuses (no entries and no
  feed version found) is handed to feedparser.
* ``feedparser``: the Universal Feed Parser, pure Python and much slower; the reference.

The differences between them on ``tests/data/feeds/``, and their speeds, are in
``docs/parsing.md``.
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
