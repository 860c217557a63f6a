"""The publication times a crawl recorded (the store's ``publications`` table), read without
writing: what ``scrapy whittle trace`` writes as a trace CSV (:mod:`.trace`), one source per feed
URL, for ``python -m sim.bench --trace`` to replay."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scrapy_whittle.report.data import ReadOnlyStore, ReportError, state_path


@dataclass(frozen=True)
class Publications:
    """The recorded entries sorted by (URL, publication time): ``names`` the sources' URLs,
    sorted; ``source`` index into them; ``published`` unix seconds; ``value`` the value the
    feed's engagement showed at capture, NaN where the feed showed none."""

    names: list[str]
    source: np.ndarray
    published: np.ndarray
    value: np.ndarray


def read_publications(jobdir_or_file: str | Path) -> Publications:
    """What the crawl's state file holds (ReportError when it holds none)."""
    store = ReadOnlyStore(state_path(jobdir_or_file))
    try:
        if not store.has_table("publications"):
            raise ReportError(
                f"{store.path} was written by a scrapy-whittle that recorded no publication "
                f"times (state schema {store.schema_version}): a crawl resumed from it with "
                "this version records them from then on")
        rows = store.rows("SELECT s.url, p.published, p.value FROM publications p "
                          "JOIN sources s ON s.id = p.source ORDER BY s.url, p.published")
    finally:
        store.close()
    if not rows:
        raise ReportError(f"{store.path} holds no publication time yet (no dated entry found "
                          "since the crawl began recording them, or WHITTLE_TRACE_DAYS = 0)")
    urls, published, values = zip(*rows, strict=True)
    names, source = np.unique(np.array(urls, dtype=object).astype(str), return_inverse=True)
    return Publications(names=names.tolist(), source=source.astype(np.int64),
                        published=np.array(published, dtype=np.float64),
                        value=np.array([np.nan if v is None else v for v in values],
                                       dtype=np.float64))
