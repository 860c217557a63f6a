"""A Scrapy crawl's users' measures (stats ``whittle/delay/*``, ``whittle/crawls_per_item``,
the report's summary) and its own feeds as a benchmark (``scrapy whittle trace``), on the
simulated web with a simulated clock: the delays and publication times are known."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter

import numpy as np
import pytest
import pytest_twisted

from scrapy_whittle.report.trace import read_trace
from scrapy_whittle.service.state.store import FILE_NAME, SqliteStateStore
from sim.web.feedweb import FeedWeb
from sim.web.scenarios import make_scenario
from tests.scrapy.conftest import VirtualWeb, make_crawler, run, whittle
from tests.scrapy.test_report import entry_points, scrapy

BIN = 10 ** 0.1            # the delay histogram's bins are this wide (ratio)
N, SEED, HOURS = 6, 2, 48.0


@pytest_twisted.async_fixture(scope="module")
async def crawl(tmp_path_factory):
    """(JOBDIR, the items yielded, the whittle/* stats, every item the web published as
    (feed URL, unix time, base value), a PYTHONPATH entry for the commands)."""
    tmp = tmp_path_factory.mktemp("trace")
    box = {}
    # feeds with two days of history, published from time 0 on: the truth below can be drawn
    # again from the same seed (a warm web's stock before time 0 depends on the feed window)
    web = VirtualWeb(n=N, seed=SEED, start=HOURS, history="empty")
    out = tmp / "items.jsonl"
    try:
        crawler = make_crawler(
            WHITTLE_CLOCK=web.clock, WHITTLE_SOURCES=web.feeds(N),
            WHITTLE_POLICY="round_robin", WHITTLE_BUDGET=3, WHITTLE_PERIOD=900,
            WHITTLE_MAX_EPOCHS=24, WHITTLE_ENGAGEMENT_SCALE=1000, JOBDIR=str(tmp / "job"),
            FEEDS={str(out): {"format": "jsonlines"}})
        box["stats"] = whittle(await run(crawler))
        box["end"] = web.clock.now()
        box["url"], box["clock"] = web.url, web.server.clock
    finally:
        await web.stop()
    box["items"] = [json.loads(line) for line in out.read_text().splitlines()]
    # the truth: everything the web published until the crawl ended (same seed, same items)
    served = FeedWeb(make_scenario("news-mix", n=N, seed=SEED).params, seed=SEED,
                     window=100_000)
    clock = box["clock"]
    truth = [(f"{box['url']}/feed/{i}.xml", clock.real(it.published), it.base)
             for i in range(N) for it in served.feed(i, clock.virtual(box["end"]))]
    return tmp / "job", box["items"], box["stats"], truth, entry_points(tmp / "meta")


def test_the_stats_give_the_delays_of_the_items_re_crawls_captured(crawl):
    _, items, w, _, _ = crawl
    first = {}                                   # a source's first fetch: the first item's
    for item in items:
        first.setdefault(item["source"], item["discovered_at"])
    assert len(first) == N
    delays = np.array([i["delay"] for i in items if i["discovered_at"] > first[i["source"]]])
    assert delays.size > 20 and (delays >= 0).all()
    assert w["delay/mean_s"] == pytest.approx(delays.mean(), rel=1e-9)
    assert 1 / BIN < w["delay/median_s"] / np.median(delays) < BIN
    assert 1 / BIN < w["delay/p90_s"] / np.quantile(delays, 0.9) < BIN
    assert w["crawls_per_item"] == pytest.approx(w["crawls"] / len(items))
    assert w["new_items"] == len(items)


def test_the_trace_is_what_the_web_published_and_the_crawl_saw(crawl, tmp_path):
    jobdir, items, _, truth, meta = crawl
    out = tmp_path / "own.csv.gz"
    result = scrapy(meta, "whittle", "trace", str(jobdir), "-o", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    trace = read_trace(out, time_unit_seconds=1.0)
    got = [(trace.names[s], t, v) for s, t, v in zip(trace.source, trace.time, trace.utility,
                                                    strict=True)]
    # every entry the spider yielded, once, with its publication time and value at capture
    assert Counter((u, t) for u, t, _ in got) == Counter(
        (i["source"], i["published"]) for i in items)
    # entry by entry: pytest.approx() takes no nested structures (pytest 9.2 raises a
    # TypeError on a list of tuples); the URL exactly, the time and value approximately
    have = sorted((u, t, v) for u, t, v in got)
    want = sorted((i["source"], i["published"], i["value"]) for i in items)
    assert len(have) == len(want)
    for (u, t, v), (wu, wt, wv) in zip(have, want, strict=True):
        assert u == wu and [t, v] == pytest.approx([wt, wv]), ((u, t, v), (wu, wt, wv))
    # each is an item the web published: its date (RSS: whole seconds), a value at capture
    # below its base value
    published = {}
    for url, t, base in truth:
        published.setdefault(url, []).append((t, base))
    for url, t, v in got:
        when, base = min(published[url], key=lambda p: abs(p[0] - t))
        assert abs(when - t) < 1.0 and v <= base + 1e-3
    assert len(got) < len(truth)                 # older items were never in a window seen


def test_the_report_shows_the_measures(crawl, tmp_path):
    from scrapy_whittle.report import load_report
    from scrapy_whittle.report.table import text

    jobdir, items, w, _, _ = crawl
    report = load_report(jobdir)
    m = report.measures
    assert m.captured == len(items) and m.crawls == w["crawls"]
    assert m.crawls_per_item == pytest.approx(w["crawls_per_item"])
    assert m.missed == pytest.approx(w.get("missed_items", 0.0))
    assert m.delays.n > 20 and m.delays.mean() == pytest.approx(w["delay/mean_s"])
    assert m.delays.quantile(0.9) == pytest.approx(w["delay/p90_s"])
    header = text(report).splitlines()[1]
    assert header.startswith(f"# entries captured {len(items)}, missed (estimated) ")
    assert "crawls per entry" in header and "90th percentile" in header


def test_the_trace_command_s_errors_are_one_line(crawl, tmp_path):
    jobdir, *_, meta = crawl
    empty = tmp_path / "empty"
    empty.mkdir()
    result = scrapy(meta, "whittle", "trace", str(empty), "-o", "x.csv", cwd=tmp_path)
    assert result.returncode == 1 and "no crawl state here" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    result = scrapy(meta, "whittle", "trace", cwd=tmp_path)             # no JOBDIR
    assert result.returncode == 2 and "give the crawl's JOBDIR" in result.stderr
    result = scrapy(meta, "whittle", "trace", str(jobdir), cwd=tmp_path)  # no -o
    assert result.returncode == 2 and "-o FILE" in result.stderr
    # a state file written before publications were recorded (schema 2)
    old = tmp_path / "old"
    old.mkdir()
    SqliteStateStore(old / FILE_NAME).close()
    db = sqlite3.connect(old / FILE_NAME)
    with db:
        db.execute("DROP TABLE publications")
        db.execute("UPDATE meta SET value = 2 WHERE key = 'schema_version'")
    db.close()
    result = scrapy(meta, "whittle", "trace", str(old), "-o", "x.csv", cwd=tmp_path)
    assert result.returncode == 1 and "recorded no publication times" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.csv").exists()
