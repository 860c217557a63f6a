"""The child sitemaps of the sitemap indexes, in Redis: what one process keeps in its SQLite
store's ``sitemap_children`` (:mod:`scrapy_whittle.service.index_children`), for a cluster's
planner.

``Keys.children`` is a hash: a child's source id -> ``"<index> <misses> <listed_at>
<dropped>"`` (the index that listed it last, that index's fetches in a row that have not
listed it since, when it was last listed, whether it retired for that). The planner's
checkpoint writes the rows of the children changed since the last one, in the transaction
that acknowledges the results they were learnt from (:class:`~scrapy_whittle.cluster.state.
RedisStateStore`), so a new planner restores what the last one had checkpointed and learns
the rest again from the results still pending.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

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


def write(pipe, keys: Keys, rows: Iterable[tuple[int, int, int, float, int]]) -> None:
    """Queue on ``pipe`` the (child, index, misses, listed_at, dropped) ``rows``."""
    mapping = {child: encode(*rest) for child, *rest in rows}
    if mapping:
        pipe.hset(keys.children, mapping=mapping)


def saved_rows(client, keys: Keys) -> list[tuple[int, int, int, float, int]]:
    """The children's rows in Redis (a synchronous client), for the planner's store; an
    unreadable value is skipped with a warning (that child is known again at its index's
    next listing)."""
    rows = []
    for key, raw in client.hgetall(keys.children).items():
        try:
            rows.append((int(key), *decode(raw)))
        except (ValueError, UnicodeDecodeError) as exc:
            logger.warning("a damaged child sitemap's row skipped (%r: %s)", key, exc)
    return rows
