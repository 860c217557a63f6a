"""The trace format: recorded publication times as a CSV, one item per row,
``source,timestamp[,utility]``. ``scrapy whittle trace`` writes a crawl's own history in it;
``python -m sim.bench --trace`` replays such a file (``sim.web.trace.TraceReplay``).

* ``source``: the source's name (any non-empty string); sources get ids in sorted name order
  (``Trace.names``);
* ``timestamp``: the publication time, a number in the trace's time unit or an ISO 8601
  date-time (converted with ``time_unit_seconds``, naive times read as UTC);
* ``utility`` (optional): the item's base utility xi; NaN in the :class:`Trace` where absent.

A header row (first field ``source``), blank lines and lines starting with ``#`` are skipped; any
other malformed row raises ValueError naming the line number and its content. A file whose name
ends in ``.gz`` is read and written gzip-compressed.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np


@dataclass(frozen=True)
class Trace:
    """Items of a trace, sorted by (source, time). ``utility`` is NaN where not given."""

    names: list[str]
    source: np.ndarray    # int64[n_items], index into names
    time: np.ndarray      # float64[n_items]
    utility: np.ndarray   # float64[n_items]


def _parse_time(text: str, time_unit_seconds: float) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp() / time_unit_seconds


def read_trace(source: str | os.PathLike | io.TextIOBase | Iterable[str],
               time_unit_seconds: float = 3600.0) -> Trace:
    """Parse a ``source,timestamp[,utility]`` CSV (a path, ``.gz`` for gzip, an open text file
    or lines)."""
    if isinstance(source, str | os.PathLike):
        with _open_text(source, "r") as fh:
            return read_trace(fh.readlines(), time_unit_seconds)
    lines = list(source)
    names: list[str] = []
    times: list[float] = []
    utils: list[float] = []
    seen_data = False
    for lineno, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        row = next(csv.reader([text]))
        if not seen_data and row and row[0].strip().lower() == "source":
            seen_data = True          # header
            continue
        seen_data = True

        def bad(why: str, lineno=lineno, text=text) -> ValueError:
            return ValueError(f"trace line {lineno}: {why}: {text!r}")

        if len(row) not in (2, 3):
            raise bad(f"expected 2 or 3 fields (source,timestamp[,utility]), got {len(row)}")
        name = row[0].strip()
        if not name:
            raise bad("empty source name")
        try:
            t = _parse_time(row[1].strip(), time_unit_seconds)
        except ValueError:
            raise bad("timestamp is neither a number nor an ISO 8601 date-time") from None
        if not math.isfinite(t):
            raise bad("timestamp must be finite")
        util = math.nan
        if len(row) == 3 and row[2].strip():
            try:
                util = float(row[2])
            except ValueError:
                raise bad("utility is not a number") from None
            if not (math.isfinite(util) and util >= 0):
                raise bad("utility must be finite and >= 0")
        names.append(name)
        times.append(t)
        utils.append(util)
    if not names:
        raise ValueError("trace holds no items")
    uniq, sid = np.unique(np.array(names, dtype=object).astype(str), return_inverse=True)
    time = np.array(times)
    utility = np.array(utils)
    order = np.lexsort((time, sid))
    return Trace([str(x) for x in uniq], sid[order].astype(np.int64), time[order], utility[order])


def write_trace(trace: Trace, path, time_unit_seconds: float | None = None) -> None:
    """Write ``trace`` as the ``source,timestamp,utility`` CSV that ``read_trace`` reads (gzip
    when ``path`` ends in ``.gz``); a NaN utility is left empty. ``time_unit_seconds``: the
    times are in units of that many seconds since the unix epoch, written as ISO 8601 UTC
    date-times, so that the file says when things happened whatever unit it is read in
    (None: the numbers as they are)."""
    with _open_text(path, "w") as fh:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow(("source", "timestamp", "utility"))
        names = trace.names
        for s, t, v in zip(trace.source.tolist(), trace.time.tolist(), trace.utility.tolist(),
                           strict=True):
            stamp = (f"{t:.6f}" if time_unit_seconds is None else
                     datetime.fromtimestamp(t * time_unit_seconds, UTC).isoformat()
                     .replace("+00:00", "Z"))
            out.writerow((names[s], stamp, "" if v != v else f"{v:.6f}"))


def _open_text(path, mode: str):
    if os.fspath(path).endswith(".gz"):
        return gzip.open(path, mode + "t", newline="", encoding="utf-8")
    return open(path, mode, newline="", encoding="utf-8")
