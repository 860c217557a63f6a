"""The users' measures the service keeps (discovery delays, entries missed, crawls per entry)
and the publication times it records for the crawl's trace, on feeds whose truth is known."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.service.decisions.measures import EDGES, N_BINS, DelayHistogram
from scrapy_whittle.service.state.store import FILE_NAME, SqliteStateStore
from tests.service.test_recrawl import START, PoissonFeeds, make_service

BIN = 10 ** 0.1            # the histogram's bins are this wide (ratio), past the first


class EngagedFeeds(PoissonFeeds):
    """Even sources show engagement (entry j of source s: s + j comments), odd ones none."""

    def entries(self, sid, now):
        out = super().entries(sid, now)
        if sid % 2:
            return out
        return [FeedEntry(key=e.key, title=None, link=None, published=e.published,
                          engagement=float(sid + int(e.key.split(":")[1]))) for e in out]


def drive(service, clock, feeds, epochs):
    """Crawl like Scrapy would (downloads instantaneous); the truth: every (source, entry,
    publication time, capture time, value) found, in order, and which were re-crawls."""
    found, seen = [], set()
    for _ in range(epochs):
        while (crawl := service.next_crawl()) is not None:
            now = clock.now()
            result = service.feed_fetched(crawl, feeds.entries(crawl.source, now))
            found += [(crawl.source, e, now, v, crawl.source in seen)
                      for e, v in zip(result.entries, result.values, strict=True)]
            seen.add(crawl.source)
        clock.advance_to(service.wake_at)
    return found


def test_the_histogram_reads_quantiles_within_a_bin_and_the_mean_exactly():
    delays = np.random.default_rng(0).lognormal(7.0, 1.5, 5000)
    h = DelayHistogram()
    h.add(delays)
    assert h.n == 5000 and h.mean() == pytest.approx(delays.mean(), rel=1e-12)
    for q in (0.5, 0.9):
        assert 1 / BIN < h.quantile(q) / np.quantile(delays, q) < BIN
    assert DelayHistogram().n == 0 and np.isnan(DelayHistogram().quantile(0.5))
    assert EDGES[0] == 0.0 and EDGES[1] == 1.0 and EDGES[-1] == pytest.approx(1e8)
    zero = DelayHistogram()
    zero.add(np.zeros(3))
    assert zero.quantile(0.5) == pytest.approx(0.5) and zero.mean() == 0.0
    rows = DelayHistogram.from_rows([(3, 2), (N_BINS, 5), (-1, 1), (4, 0)], 9.0)
    assert rows.counts.sum() == 2 and rows.counts[3] == 2 and rows.seconds == 9.0


def test_the_stats_give_the_delays_of_the_entries_re_crawls_captured():
    service, clock = make_service(n=4, budget=2, period=600.0)
    feeds = PoissonFeeds([1 / 300, 1 / 900, 1 / 120, 1 / 2000], window=50)
    found = drive(service, clock, feeds, 40)
    service.close()
    delays = np.array([now - e.published for _, e, now, _, again in found if again])
    stats = service.stats
    assert delays.size > 100 and delays.min() >= 0
    assert stats.get("delay/mean_s") == pytest.approx(delays.mean(), rel=1e-9)
    assert 1 / BIN < stats.get("delay/median_s") / np.median(delays) < BIN
    assert 1 / BIN < stats.get("delay/p90_s") / np.quantile(delays, 0.9) < BIN
    # every source is crawled every 1200 s: no entry of a re-crawl waited longer
    assert delays.max() <= 1200.0 and stats.get("delay/p90_s") <= 1200.0 * BIN
    assert stats.get("crawls_per_item") == pytest.approx(stats.get("crawls") / len(found))


def test_the_store_holds_each_epochs_measures_and_every_dated_entry_found(tmp_path):
    path = tmp_path / FILE_NAME
    service, clock = make_service(n=4, budget=2, period=600.0, store=SqliteStateStore(path),
                                  WHITTLE_ENGAGEMENT_SCALE=10)
    feeds = EngagedFeeds([1 / 60, 1 / 900, 1 / 200, 1 / 2000], window=5)   # source 0 misses
    found = drive(service, clock, feeds, 30)
    service.close()
    db = sqlite3.connect(path)
    missed, delay_s = db.execute("SELECT sum(missed_items), sum(delay_seconds) "
                                 "FROM epoch_measures").fetchone()
    assert missed == pytest.approx(service.stats.get("missed_items")) and missed > 5
    assert delay_s == pytest.approx(sum(now - e.published for _, e, now, _, again in found
                                        if again))
    counts = db.execute("SELECT sum(count) FROM epoch_delays").fetchone()[0]
    assert counts == sum(again for *_, again in found)
    rows = sorted(db.execute("SELECT source, published, value FROM publications"))
    db.close()
    truth = sorted((sid, e.published, v if sid % 2 == 0 else None)
                   for sid, e, _, v, _ in found)
    assert rows == truth and len(truth) == len(found)
    # the values are those the feeds' engagement gave: comments / WHITTLE_ENGAGEMENT_SCALE
    assert all(v * 10 == sid + int(e.key.split(":")[1]) for sid, e, _, v, _ in found
               if sid % 2 == 0)


def test_a_publication_is_stored_with_the_checkpoint_that_records_its_entry(tmp_path):
    """A crash after a checkpoint loses the publications found since, as it loses their
    entries: found again after the restart, each is stored once."""
    path = tmp_path / FILE_NAME
    feeds = PoissonFeeds([1 / 100, 1 / 300, 1 / 200], window=30)
    service, clock = make_service(n=3, budget=2, period=600.0, store=SqliteStateStore(path))
    found = drive(service, clock, feeds, 4)
    service.checkpoint()
    stored = len(found)
    found += drive(service, clock, feeds, 3)          # then killed: no checkpoint, no close
    assert len(found) > stored
    restored, _ = make_service(n=3, budget=2, period=600.0, store=SqliteStateStore(path),
                               clock=clock)
    found += drive(restored, clock, feeds, 6)
    restored.close()
    db = sqlite3.connect(path)
    rows = db.execute("SELECT source, published FROM publications").fetchall()
    db.close()
    truth = {(sid, e.published) for sid, e, *_ in found}
    assert len(rows) == len(set(rows)) == len(truth) and set(rows) == truth


def test_publications_older_than_the_retention_are_deleted(tmp_path):
    path = tmp_path / FILE_NAME
    days = 0.1
    service, clock = make_service(n=2, budget=2, period=600.0, store=SqliteStateStore(path),
                                  WHITTLE_TRACE_DAYS=days)
    found = drive(service, clock, PoissonFeeds([1 / 300, 1 / 500], window=30), 40)
    service.close()
    db = sqlite3.connect(path)
    times = [t for (t,) in db.execute("SELECT published FROM publications")]
    db.close()
    cutoff = clock.now() - days * 86400
    assert min(e.published for _, e, *_ in found) < cutoff
    assert sorted(times) == sorted(e.published for _, e, *_ in found
                                   if e.published >= cutoff)
    assert START < min(times)


def test_no_publications_kept_when_the_trace_is_off(tmp_path):
    path = tmp_path / FILE_NAME
    service, clock = make_service(n=2, budget=2, store=SqliteStateStore(path), WHITTLE_TRACE_DAYS=0)
    drive(service, clock, PoissonFeeds([1 / 300, 1 / 500]), 5)
    service.close()
    db = sqlite3.connect(path)
    assert db.execute("SELECT count(*) FROM publications").fetchone() == (0,)
    db.close()
