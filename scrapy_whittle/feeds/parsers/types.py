"""The data every feed parser adapter produces: the project's own entry type, the result of a
parse, its typed error and the per-feed limits. No parser library is imported here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scrapy_whittle.feeds.hints import FeedHints

#: kinds of :class:`FeedError` (stats keys ``whittle/errors/<kind>``)
FEED_ERROR_KINDS = ("empty", "not_a_feed", "malformed", "too_large", "encoding", "parse_failed")

#: kinds of :attr:`ParsedFeed.notices`: a usable feed that a limit or a defect changed
NOTICE_KINDS = ("too_many_entries", "field_too_long", "fallback_parser", "doctype_removed",
                "no_dates", "future_dates", "ancient_dates", "duplicate_ids",
                "entries_dropped", "sources_refused")

MAX_BYTES = 10 * 1024 * 1024


class FeedError(ValueError):
    """The body is not a usable feed. ``kind`` is one of ``FEED_ERROR_KINDS`` (for stats keys
    such as ``whittle/errors/not_a_feed``)."""

    def __init__(self, kind: str, message: str) -> None:
        if kind not in FEED_ERROR_KINDS:
            raise ValueError(f"unknown FeedError kind {kind!r}")
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message

    def __reduce__(self):          # picklable across the worker processes of the parse pool
        return (type(self), (self.kind, self.message))


@dataclass(frozen=True)
class FeedEntry:
    key: str
    title: str | None
    link: str | None
    published: float | None       # unix seconds; None if absent or absurd
    engagement: float | None      # slash:comments or thr:total


@dataclass(frozen=True)
class ParsedFeed:
    kind: str                     # "rss20", "atom10", "rss10", ..., "json11", "sitemap", ...
    entries: list[FeedEntry]
    warnings: list[str] = field(default_factory=list)
    #: what changed the feed on its way (kinds from ``NOTICE_KINDS``, once each)
    notices: tuple[str, ...] = ()
    hints: FeedHints = field(default_factory=FeedHints)   # the feed's own refresh hints
    parser: str = ""              # the parser that produced it (after any fallback)
    #: sources this one names (a sitemap index's children), to be crawled as sources
    sources: tuple[str, ...] = ()
    #: the index was read only in part (more children than the entry cap, or broken XML):
    #: ``sources`` may lack children it lists
    sources_partial: bool = False

    def __reduce__(self):
        # From a parse worker to the event loop, the entries travel as columns: unpickled
        # on the loop in about half the time of one pickled object per entry.
        columns = tuple(zip(*((e.key, e.title, e.link, e.published, e.engagement)
                              for e in self.entries), strict=True)) or ((),) * 5
        return (_parsed_feed, (self.kind, columns, self.warnings, self.notices, self.hints,
                               self.parser, self.sources, self.sources_partial))


def _parsed_feed(kind, columns, warnings, notices, hints, parser, sources,
                 sources_partial=False) -> ParsedFeed:
    return ParsedFeed(kind=kind, entries=[FeedEntry(*row) for row in zip(*columns, strict=True)],
                      warnings=warnings, notices=notices, hints=hints, parser=parser,
                      sources=sources, sources_partial=sources_partial)


@dataclass(frozen=True)
class ParseLimits:
    """Per-feed limits that bound the work and memory one response can cost.

    ``max_bytes``: a larger body is the error ``too_large`` (checked before parsing).
    ``max_entries``: only the first ``max_entries`` entries in feed order are kept (always the
    same ones for the same feed, so entry identity is stable across crawls); more is the
    notice ``too_many_entries``. ``max_field_chars``: a longer title is cut, a longer link is
    dropped, a longer id is replaced by its SHA-1 (notice ``field_too_long``).
    """

    max_bytes: int = MAX_BYTES
    max_entries: int = 10_000
    max_field_chars: int = 2048

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_entries", "max_field_chars"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ParseLimits.{name} ({value!r}) must be an integer >= 1")


#: the fields of a feedparser entry that :class:`RawFeed` entries carry
FIELDS = ("id", "title", "link", "summary", "published_parsed", "updated_parsed",
          "slash_comments", "thr_total")


@dataclass
class RawFeed:
    """What a parser adapter returns: feedparser-shaped entries (dicts of ``FIELDS``, with
    feedparser's meaning), in feed order, at most ``max_entries`` of them."""

    version: str
    entries: Sequence[Mapping[str, Any]]
    problem: BaseException | None = None   # the parser's bozo exception, if any
    hints: FeedHints = field(default_factory=FeedHints)  # ttl, skipHours/Days, sy:update*
    capped: bool = False                   # entries beyond max_entries were left out
    #: the parser stopped on broken XML and may have missed entries that feedparser's
    #: lenient mode would read (parse_feed then tries feedparser)
    incomplete: bool = False
    #: sources this one names (a sitemap index's children on its own host)
    sources: tuple[str, ...] = ()
    sources_refused: int = 0               # children left out (another host, not http)
