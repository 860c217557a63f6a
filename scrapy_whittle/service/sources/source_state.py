"""What the re-crawl service keeps of each source beyond the source table: the conditional-GET
validators, the counters, and which rows the next checkpoint must write."""

from __future__ import annotations

import numpy as np

from scrapy_whittle.core.columns import Col, PerSourceArrays, StringColumn


class SourceState(PerSourceArrays):
    """Per-source validators and counters (Last-Modified as unix seconds, 0 = none; the ETags
    packed in a StringColumn). ``last_ok`` (when the last successful fetch was sent) and
    ``peak`` (most new entries one fetch taught) bound what a fetch may teach
    (:mod:`scrapy_whittle.core.sanitize`). Neither is stored: a restart takes ``last_ok``
    from the stored last crawl where no failure followed it (it is that crawl's time), and
    starts ``peak`` again (the burst cap of a first fetch).

    ``dirty`` marks the rows changed since the last checkpoint; it is kept only with
    ``track_changes`` (a service with a store), so a crawl without one pays nothing for it."""

    per_source = {"modified": Col(0, np.uint32),
                  "crawls": Col(0, np.uint32), "errors": Col(0, np.uint32),
                  "new_items": Col(0, np.uint32), "utility": Col(0.0, np.float32),
                  "last_ok": Col(np.nan, np.float64), "peak": Col(0, np.uint32),
                  # a mask, not a set of ids: bounded whatever the checkpoint interval
                  "dirty": Col(False, np.bool_, persist=False)}

    def __init__(self) -> None:
        self.etag = StringColumn()
        self.track_changes = False
        self._init_arrays(0)

    def grow(self, k: int) -> None:
        self.grow_arrays(k)
        self.etag.grow_arrays(k)

    def touch(self, sid) -> None:
        """Source(s) ``sid`` changed: the next checkpoint writes their rows."""
        if self.track_changes:
            self.dirty[sid] = True
