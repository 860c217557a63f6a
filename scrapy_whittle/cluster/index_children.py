"""The child sitemaps of the sitemap indexes, in Redis: what one process keeps in its SQLite
store's ``sitemap_children`` (:mod:`scrapy_whittle.service.sources.index_children`), for a cluster's
planner.

``Keys.children(t)`` is a hash per tag: a child's source id -> ``"<index> <misses>
<listed_at> <dropped>"`` (the index that listed it last, that index's fetches in a row that
have not listed it since, when it was last listed, whether it retired for that). A child's
row is under its own tag, beside its record (which holds its retirement), and the planner's
checkpoint writes the rows of the children changed since the last one in the transaction of
that tag's records (:class:`~scrapy_whittle.cluster.state.RedisStateStore`): a new planner
restores a child's row and its retirement together, and learns the rest again from the
results still pending.

``Keys.indexes(t)`` is a hash per tag too: an index's source id -> ``[<partial>,
<listed_at>, [<URL>, ...]]`` (JSON: whether its last listing was read only in part, when it
was read, the children it named whose registration the planner had not read yet), under the
index's tag, written with the checkpoint when it changed. The registrations themselves ride
the results stream after the index's result: those a killed planner had not checkpointed are
read again by the next one, which links them to the index this row names.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from scrapy_whittle.cluster.keys import SPREAD

if TYPE_CHECKING:
    from scrapy_whittle.cluster.keys import Keys

logger = logging.getLogger(__name__)


def encode(parent: int, misses: int, listed_at: float, dropped: int) -> str:
    """A child's value in ``Keys.children``."""
    return f"{int(parent)} {int(misses)} {float(listed_at)!r} {int(bool(dropped))}"


def decode(raw: bytes | str) -> tuple[int, int, float, int]:
    """Inverse of :func:`encode`; ValueError: not a child's value."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    parent, misses, listed_at, dropped = text.split(" ")
    row = int(parent), int(misses), float(listed_at), int(dropped)
    if row[0] < 0 or row[1] < 0 or not math.isfinite(row[2]) or row[3] not in (0, 1):
        raise ValueError(f"not a child sitemap's row: {text[:100]!r}")
    return row


def _write(at: Callable[[int], Any], keys: Keys, key_of: Callable[[int], str],
           values: Iterable[tuple[int, str]]) -> None:
    """Queue each (source id, value) in the hash ``key_of(tag)`` of its tag, on ``at(id)``
    (the pipeline of that tag)."""
    by_tag: dict[int, dict[int, str]] = {}
    for sid, value in values:
        by_tag.setdefault(keys.tag_of(sid), {})[sid] = value
    for t, mapping in by_tag.items():
        at(next(iter(mapping))).hset(key_of(t), mapping=mapping)


def _read(client, key_of: Callable[[int], str], decode_value: Callable, what: str) -> list:
    """(source id, *decoded value) of every tag's hash ``key_of(tag)`` (a synchronous client;
    one pipeline); an unreadable value is skipped with a warning."""
    pipe = client.pipeline(transaction=False)
    for t in range(SPREAD):
        pipe.hgetall(key_of(t))
    rows = []
    for tag in pipe.execute():
        for key, raw in tag.items():
            try:
                rows.append((int(key), *decode_value(raw)))
            except (ValueError, UnicodeDecodeError) as exc:
                logger.warning("a damaged %s's row skipped (%r: %s)", what, key, exc)
    return rows


def write(at: Callable[[int], Any], keys: Keys,
          rows: Iterable[tuple[int, int, int, float, int]]) -> None:
    """Queue the (child, index, misses, listed_at, dropped) ``rows``, each on ``at(child)``
    (the pipeline of the child's tag)."""
    _write(at, keys, keys.children, ((child, encode(*rest)) for child, *rest in rows))


def saved_rows(client, keys: Keys) -> list[tuple[int, int, int, float, int]]:
    """The children's rows in Redis (a synchronous client; every tag's, in one pipeline), for
    the planner's store; an unreadable value is skipped with a warning (that child is known
    again at its index's next listing)."""
    return _read(client, keys.children, decode, "child sitemap")


def encode_index(partial: int, listed_at: float, awaiting: Iterable[str]) -> str:
    """An index's value in ``Keys.indexes``."""
    return json.dumps([int(bool(partial)), float(listed_at), list(awaiting)],
                      ensure_ascii=False)


def decode_index(raw: bytes | str) -> tuple[int, float, tuple[str, ...]]:
    """Inverse of :func:`encode_index`; ValueError: not an index's value."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    value = json.loads(text)
    if not (isinstance(value, list) and len(value) == 3 and value[0] in (0, 1)
            and isinstance(value[1], int | float) and math.isfinite(value[1])
            and isinstance(value[2], list) and all(isinstance(u, str) for u in value[2])):
        raise ValueError(f"not a sitemap index's row: {text[:100]!r}")
    return int(value[0]), float(value[1]), tuple(value[2])


def write_indexes(at: Callable[[int], Any], keys: Keys,
                  rows: Iterable[tuple[int, int, float, tuple[str, ...]]]) -> None:
    """Queue the (index, partial, listed_at, awaiting URLs) ``rows``, each on ``at(index)``
    (the pipeline of the index's tag)."""
    _write(at, keys, keys.indexes,
           ((parent, encode_index(*rest)) for parent, *rest in rows))


def saved_indexes(client, keys: Keys) -> list[tuple[int, int, float, tuple[str, ...]]]:
    """The indexes' rows in Redis, as :func:`saved_rows` reads the children's; an
    unreadable value is skipped with a warning (the index's next listing writes it
    again)."""
    return _read(client, keys.indexes, decode_index, "sitemap index")
