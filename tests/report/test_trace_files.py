"""The trace format (scrapy_whittle.report.trace): gzip, quoted source names, empty utilities,
ISO 8601 date-times."""

from __future__ import annotations

import gzip
import math

import numpy as np
import pytest

from scrapy_whittle.report.trace import Trace, read_trace, write_trace

HOUR = 3600.0


def _trace() -> Trace:
    # names with a comma and a quote: URLs may hold both
    return Trace(names=['http://a.example/feed?x=1,2', 'http://b.example/"q"'],
                 source=np.array([0, 0, 1]),
                 time=np.array([1_700_000_000.0, 1_700_003_600.5, 1_700_000_001.0]),
                 utility=np.array([0.25, math.nan, 3.0]))


@pytest.mark.parametrize("name", ["trace.csv", "trace.csv.gz"])
def test_a_written_trace_reads_back_the_same(tmp_path, name):
    path = tmp_path / name
    write_trace(_trace(), path)
    back = read_trace(path)
    assert back.names == _trace().names
    assert back.source.tolist() == [0, 0, 1]
    assert back.time.tolist() == [1_700_000_000.0, 1_700_003_600.5, 1_700_000_001.0]
    assert back.utility[0] == 0.25 and np.isnan(back.utility[1]) and back.utility[2] == 3.0


def test_gz_is_gzip(tmp_path):
    path = tmp_path / "t.csv.gz"
    write_trace(_trace(), path)
    assert gzip.decompress(path.read_bytes()).startswith(b"source,timestamp,utility\n")


def test_unix_seconds_written_as_dates_read_in_hours(tmp_path):
    path = tmp_path / "t.csv"
    write_trace(_trace(), path, time_unit_seconds=1.0)
    assert "2023-11-14T22:13:20Z" in path.read_text()
    back = read_trace(path)                           # default unit: the hour
    assert back.time[0] == pytest.approx(1_700_000_000.0 / HOUR, abs=1e-9)
    assert (back.time[1] - back.time[0]) * HOUR == pytest.approx(3600.5, abs=1e-6)
