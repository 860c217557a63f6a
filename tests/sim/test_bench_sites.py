"""sim.bench.sites on a small web: it measures what the crawl found against what the sites
link, and the search finds every linked feed and no decoy."""

from sim.bench.sites import one_web


def test_the_bench_measures_a_crawl_from_sites():
    row = one_web(n=24, sites=5, seed=1, period=1.0)
    assert row["sites"] == 6 and row["truly_without"] == 1
    assert row["linked"] > 0
    assert row["found"] == row["linked"] and row["false"] == 0
    assert row["without_feeds"] == 1
    assert row["sources"] == row["found"] and row["new_items"] > 0
