"""JSON Feed 1.0 and 1.1 (https://jsonfeed.org/version/1.1), read with the standard library's
``json`` into the entries every parser returns (:class:`RawFeed`), so that
:func:`scrapy_whittle.feeds.parse.parse_feed` applies the same rules to them as to RSS / Atom.

A JSON Feed is a JSON object whose ``version`` starts with ``https://jsonfeed.org/version/``
(told from the body, not from the URL or the Content-Type). feedparser 6.0 does not read JSON
Feed; feedparser-rs does, but drops a field of the wrong type silently (a numeric ``id``,
which the 1.1 specification asks readers to take as a string) and it is only one of the two
parsers of ``WHITTLE_FEED_PARSER``: this reader serves both.

Mapping: ``id`` (a number is taken as its string, as the specification asks) -> ``id``;
``url``, else ``external_url`` -> ``link``; ``title``; ``summary``, else ``content_text``,
else ``content_html`` -> ``summary`` (the key of an item without id or url);
``date_published`` -> ``published_parsed``, ``date_modified`` -> ``updated_parsed`` (RFC
3339). Authors (``authors``, 1.0's ``author``) are not part of the entry model (neither
identity nor time) and are not kept. A field of the wrong type is ignored, an item that is
not an object is an entry without fields (dropped, counted); ``items`` missing or not a list
is a feed without entries.

Hostile input: the body is within ``limits.max_bytes`` before it gets here; a body with more
``{`` and ``[`` than ``max_containers(limits)`` is ``too_large`` before decoding; nesting deeper
than the decoder's recursion limit, an integer of more than 4,300 digits, invalid UTF-8 or
invalid JSON are the error ``malformed``, never a crash; long strings are cut by
``parse_feed`` like any field; at most ``limits.max_entries`` items are read.
"""

from __future__ import annotations

import json
from typing import Any

from scrapy_whittle.feeds.kinds import w3c_date
from scrapy_whittle.feeds.parsers.types import FeedError, ParseLimits, RawFeed

VERSION_PREFIX = "https://jsonfeed.org/version/"
#: the versions by their ``version`` URL, named as feedparser-rs names them
#: a bound on the objects and arrays the decoder builds (``{}`` and ``[]`` cost it about
#: 60 bytes each: a 10 MB body of ``[{},{},...]`` would take hundreds of MB): the count of
#: ``{`` and ``[`` in the body, an upper bound found without decoding
CONTAINERS_PER_ENTRY = 20
MIN_CONTAINERS = 100_000
VERSIONS = {VERSION_PREFIX + "1": "json10", VERSION_PREFIX + "1.1": "json11"}


def parse(data: bytes, *, url: str, limits: ParseLimits) -> RawFeed:
    """The items of the JSON Feed ``data``; FeedError ``malformed`` (not JSON, too deep) or
    ``not_a_feed`` (JSON, but no JSON Feed)."""
    containers = data.count(b"{") + data.count(b"[")
    most = max_containers(limits)
    if containers > most:
        raise FeedError("too_large", f"{url}: JSON with up to {containers} objects and arrays "
                        f"(limit {most}: {CONTAINERS_PER_ENTRY} per entry)")
    try:
        document = json.loads(data.decode("utf-8-sig"))
    except RecursionError:
        raise FeedError("malformed", f"{url}: JSON nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError, too many digits
        raise FeedError("malformed", f"{url}: not valid JSON ({_short(exc)})") from None
    version = document.get("version") if isinstance(document, dict) else None
    if not isinstance(version, str) or not version.startswith(VERSION_PREFIX):
        raise FeedError("not_a_feed", f"{url} is a JSON document but no JSON Feed (no "
                        f"version starting {VERSION_PREFIX})")
    items = document.get("items")
    if not isinstance(items, list):
        items = []
    capped = len(items) > limits.max_entries
    return RawFeed(version=VERSIONS.get(version.rstrip("/"), "json"), capped=capped,
                   entries=[_entry(item) for item in items[:limits.max_entries]])


def max_containers(limits: ParseLimits) -> int:
    """The most ``{`` and ``[`` a JSON body may hold (counted in strings too)."""
    return max(MIN_CONTAINERS, CONTAINERS_PER_ENTRY * limits.max_entries)


def _entry(item: Any) -> dict[str, Any]:
    if not isinstance(item, dict):
        return {}
    entry_id = item.get("id")
    if isinstance(entry_id, int | float) and not isinstance(entry_id, bool):
        entry_id = str(entry_id)
    summary = next((v for v in (item.get("summary"), item.get("content_text"),
                                item.get("content_html")) if _string(v)), None)
    return {"id": _string(entry_id),
            "link": _string(item.get("url")) or _string(item.get("external_url")),
            "title": _string(item.get("title")), "summary": summary,
            "published_parsed": w3c_date(item.get("date_published")),
            "updated_parsed": w3c_date(item.get("date_modified"))}


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= 200 else text[:200] + "..."
