"""Overlapping feeds: the web has the overlap it says, and the service with the link identity
emits each story once where the per-feed identity emits copies."""

from sim.bench.overlap import OverlapWeb, crawl, run


def test_the_web_lists_stories_in_several_feeds():
    web = OverlapWeb(3, 100.0, seed=1)
    assert 0.2 < web.overlap < 0.5
    agg = web.listings[web.aggregator]
    front = {x.story for x in web.listings[0]}
    assert agg and all(x.story in front for x in agg)          # it only repeats
    shown = web.entries(0, 50.0)
    assert 0 < len(shown) <= 20 and shown[0].published >= shown[-1].published


def test_each_story_is_emitted_once_with_the_link_identity():
    web = OverlapWeb(2, 49.0, seed=0)
    link, entry = (crawl(web, d, budget=2, epochs=48, seed=0) for d in ("link", "entry"))
    assert link["duplicates"] == 0 and link["items"] == link["stories"] > 0
    assert entry["duplicates"] > 0 and entry["items"] > entry["stories"]


def test_the_report_has_both_identities():
    result = run(fronts=1, budget=1, epochs=12, seeds=1)
    assert set(result) >= {"link", "entry", "overlap", "feeds"}
    assert result["link"]["duplicates"] == 0
