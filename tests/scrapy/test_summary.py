"""The summary every crawl logs when it closes (``WhittleStats.stop``), from its stats."""

from __future__ import annotations

import logging

from scrapy_whittle.scrapy.stats import WhittleStats, summary_lines


def test_the_summary_says_each_measure_and_what_it_counts():
    values = {"crawls": 709, "new_items": 13239, "utility": 34405.31, "not_modified": 2,
              "errors/http_404": 3, "errors/timeout": 1, "budget_used": 0.985,
              "discovery/crawls": 5, "probes/crawls": 2, "delay/mean_s": 90.0,
              "delay/median_s": 30.0, "delay/p90_s": 9000.0, "missed_items": 3826.4}
    assert summary_lines(values) == [
        "crawls 709, new stories 13239, utility captured 34405.3, not modified 2, errors 4, "
        "budget used 98.5%, 7 crawls outside the budget (first fetches, probes)",
        "discovery delay of the stories re-crawls found (publication to capture; a feed's "
        "first look finds its backlog): mean 90.0 s, median 30.0 s, p90 2.5 h",
        "stories lost to full feed windows since the first looks: about 3826 (an estimate: "
        "the entries the learned publishing rates say a feed pushed out of its window "
        "between two crawls)"]
    # a crawl that measured nothing yet says only what it did
    assert summary_lines({"crawls": 0}) == [
        "crawls 0, new stories 0, utility captured 0.0, not modified 0, errors 0"]


def test_every_crawl_logs_it_when_its_stats_stop(caplog):
    stats = WhittleStats(None, interval=0, policy="whittle")
    stats.inc("crawls", 3)
    stats.inc("new_items", 7)
    with caplog.at_level(logging.INFO, logger="scrapy_whittle.scrapy.stats"):
        stats.stop()
    assert "Whittle summary:\n  crawls 3, new stories 7," in caplog.text
