"""sim.serve --realistic: real-sized entries, gzip when accepted, the same text at every
fetch; and sim.bench.throughput's JSON report on a tiny run."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import pytest

from scrapy_whittle.feeds.parse import parse_feed
from tests.scrapy.conftest import ROOT, Server
from tests.scrapy.test_serve import get


@pytest.fixture(scope="module")
def realistic():
    server = Server("--n", "4", "--realistic", "--window", "50", "--start", "2000",
                    "--speed", "1", "--seed", "3")
    yield server
    server.stop()


def test_realistic_feeds_weigh_what_news_feeds_weigh(realistic):
    for i, kind in ((0, "rss20"), (1, "atom10")):
        url = f"{realistic.url}/feed/{i}.xml"
        status, headers, packed = get(url, {"Accept-Encoding": "gzip"})
        assert status == 200 and headers["Content-Encoding"] == "gzip"
        assert "charset=UTF-8" in headers["Content-Type"]
        body = gzip.decompress(packed)
        assert len(packed) < len(body) / 2
        _, plain_headers, plain = get(url)
        assert "Content-Encoding" not in plain_headers
        feed = parse_feed(body, url=url, now=4e9, content_type=headers["Content-Type"])
        assert feed.kind == kind and len(feed.entries) == 50
        assert 25_000 < len(body) < 70_000, len(body)
        assert all(8 <= len(e.title.split()) <= 14 for e in feed.entries)
        again = parse_feed(plain, url=url, now=4e9)
        assert [(e.key, e.title) for e in again.entries] == \
            [(e.key, e.title) for e in feed.entries]


def test_bench_throughput_json_report():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-m", "sim.bench", "throughput", "--feeds", "10", "--seconds", "1",
         "--warmup", "0.5", "--window", "20", "--no-hostile", "--json"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=True)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    for key in ("bare_per_s", "stack_per_s", "ratio", "max_stall_ms", "peak_rss_mb",
                "cpu_ms_per_feed", "parse_ms_40kb", "load_before"):
        assert key in report
    assert report["bare_per_s"] > 0 and report["stack_per_s"] > 0
    assert report["ratio"] == pytest.approx(report["stack_per_s"] / report["bare_per_s"])
    assert report["parse_ms_40kb"]["feed_kb"] > 30
