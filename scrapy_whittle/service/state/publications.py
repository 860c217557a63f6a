"""The publication times of the entries a crawl found, for its trace (``scrapy whittle
trace``: the trace CSV, ``scrapy_whittle.report.trace``, a benchmark replays).

The entries a fetch found new wait here until the next checkpoint, which writes them in the
transaction that records them as seen (the store's ``publications`` table): after a crash an
entry is in the table exactly when the restored crawl knows it, so one seen again after the
restart is recorded once. Only dated entries are written (an undated one would put a false
time in the trace), with their value where their feed showed engagement (``slash:comments``
and the like, divided by ``WHITTLE_ENGAGEMENT_SCALE``): the value observed at capture.
Entries are turned into rows when the checkpoint is written, in the store's thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from scrapy_whittle.feeds.parse import FeedEntry


class PublicationLog:
    """Entries found new since the last checkpoint, per fetch; ``enabled`` when the crawl
    keeps a state file and ``WHITTLE_TRACE_DAYS`` > 0."""

    def __init__(self) -> None:
        self.enabled = False
        self.pending: list[tuple[int, list[FeedEntry], list[float]]] = []

    def add(self, sid: int, entries: list[FeedEntry], values: list[float]) -> None:
        """A fetch of source ``sid`` found ``entries`` new, worth ``values`` at capture."""
        self.pending.append((sid, entries, values))

    def drain(self) -> tuple[int, Callable[[], Iterator[tuple]]]:
        """(fetches waiting, a function giving their rows (source, published, value or
        None)); the log starts again empty."""
        pending, self.pending = self.pending, []
        return len(pending), lambda: _rows(pending)


def _rows(pending) -> Iterator[tuple]:
    for sid, entries, values in pending:
        for e, v in zip(entries, values, strict=True):
            if e.published is not None:
                yield sid, e.published, v if e.engagement is not None else None
