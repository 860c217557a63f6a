"""Child sitemaps leave the crawl when their sitemap index stops listing them: a child not
listed for WHITTLE_SITEMAP_CHILD_MISSES of the index's fetches (a 304 repeats the previous
listing), or last listed more than WHITTLE_SITEMAP_CHILD_MAX_AGE seconds ago, retires through
the retirement path (counted, probed, what was learned kept); listed again it comes back; a
source on the user's list never retires this way; a listing read in part counts no miss; all
of it survives a restart."""

from __future__ import annotations

from scrapy_whittle.service.recrawl import RecrawlService
from scrapy_whittle.service.sources.registry import SourceSpec
from scrapy_whittle.service.state.store import SqliteStateStore
from tests.service.test_recrawl import make_service
from tests.service.test_retirement import crawl_all

INDEX = "https://s0.example/feed.xml"             # make_service's source 0 is the index
USER = "https://s1.example/feed.xml"              # on the user's list, and in the index
HOST = "https://s0.example"
C1, C2 = f"{HOST}/news-1.xml", f"{HOST}/news-2.xml"


class Site:
    """The index's answers: a listing (a list of URLs), "304", or a listing read in part
    (("partial", urls)); every other source answers 304."""

    def __init__(self, service) -> None:
        self.service = service
        self.answer = [C1, C2, USER]

    def __call__(self, crawl) -> None:
        service = self.service
        if crawl.source != 0 or self.answer == "304":
            service.not_modified(crawl)
            return
        service.feed_fetched(crawl, [])
        if isinstance(self.answer, tuple):
            service.index_listed(crawl, self.answer[1], complete=False)
        else:
            service.index_listed(crawl, self.answer)


def start(tmp_path, **settings):
    service, clock = make_service(n=2, budget=8, store=SqliteStateStore(tmp_path / "w.sqlite"),
                                  **settings)
    return service, clock, Site(service)


def epoch(service, clock, site) -> list[int]:
    """The next epoch's crawls, each answered by ``site``; the ids crawled."""
    clock.advance_to(clock.now() + 600.0)
    return crawl_all(service, site)


def _spec(url):
    return SourceSpec(url=url)


def test_a_child_no_longer_listed_retires_after_k_fetches_and_comes_back_when_listed(tmp_path):
    service, clock, site = start(tmp_path)
    crawl_all(service, site)                     # the index lists C1, C2 (unknown yet), USER
    c1, c2 = (service.add_source(_spec(u)) for u in (C1, C2))     # the spider registers them
    assert epoch(service, clock, site).count(c1) == 1
    site.answer = [C2, USER]                     # the site rotated C1 out
    for misses in (1, 2):
        assert c1 in epoch(service, clock, site)
        assert service.children.children[c1].misses == misses
        assert not service.sources.retired[c1]
    epoch(service, clock, site)                  # the third fetch without it
    assert service.sources.retired[c1] and not service.sources.retired[c2]
    assert service.stats.get("sources/unlisted") == 1
    assert service.stats.get("sources/retired") == 1
    assert not service.sources.retired[1]        # the user's: listed, never retired so
    assert c1 not in epoch(service, clock, site)         # retired: not crawled
    assert service.stats.get("sources/unlisted") == 1    # retired once, not at every fetch
    site.answer = [C1, C2]                       # listed again (and USER no more)
    epoch(service, clock, site)
    assert not service.sources.retired[c1] and service.stats.get("sources/relisted") == 1
    assert c1 in epoch(service, clock, site)     # crawled again
    assert not service.sources.retired[1]
    service.close()


def test_a_304_of_the_index_repeats_its_listing(tmp_path):
    service, clock, site = start(tmp_path)
    crawl_all(service, site)
    c1, c2 = (service.add_source(_spec(u)) for u in (C1, C2))
    site.answer = [C2, USER]
    epoch(service, clock, site)                  # one miss
    site.answer = "304"
    epoch(service, clock, site)                  # the same listing: a second
    assert service.children.children[c1].misses == 2
    assert service.children.children[c2].misses == 0
    assert service.children.children[c2].listed_at == clock.now()
    epoch(service, clock, site)
    assert service.sources.retired[c1] and not service.sources.retired[c2]
    service.close()


def test_a_listing_read_in_part_counts_no_miss(tmp_path):
    service, clock, site = start(tmp_path)
    crawl_all(service, site)
    c1, _ = (service.add_source(_spec(u)) for u in (C1, C2))
    site.answer = ("partial", [C2])              # more children than the cap: C1 may be there
    for _ in range(5):
        epoch(service, clock, site)
    assert service.children.children[c1].misses == 0
    site.answer = "304"                          # a 304 repeats a partial listing: no miss
    epoch(service, clock, site)
    assert service.children.children[c1].misses == 0 and not service.sources.retired[c1]
    service.close()


def test_a_child_last_listed_longer_ago_than_the_max_age_retires(tmp_path):
    service, clock, site = start(tmp_path, WHITTLE_SITEMAP_CHILD_MISSES=0,
                                 WHITTLE_SITEMAP_CHILD_MAX_AGE=1800.0)
    crawl_all(service, site)
    c1, _ = (service.add_source(_spec(u)) for u in (C1, C2))
    listed = clock.now()
    site.answer = [C2]
    while not service.sources.retired[c1]:
        assert clock.now() - listed < 1800.0
        epoch(service, clock, site)
    assert clock.now() - listed == 1800.0        # at the first fetch that old
    assert service.stats.get("sources/unlisted") == 1
    service.close()


def test_the_children_survive_a_restart(tmp_path):
    service, clock, site = start(tmp_path)
    crawl_all(service, site)
    _, c2 = (service.add_source(_spec(u)) for u in (C1, C2))
    site.answer = [C1, USER]
    epoch(service, clock, site)
    epoch(service, clock, site)                  # C2: two misses
    service.close()
    again = RecrawlService(service.config, clock=clock,
                           store=SqliteStateStore(tmp_path / "w.sqlite"))
    again.open([_spec(INDEX), _spec(USER)])
    assert again.children.children[c2].misses == 2
    site.service = again
    epoch(again, clock, site)                    # the third miss, after the restart
    assert again.sources.retired[c2] and again.children.children[c2].dropped
    again.close()
    third = RecrawlService(service.config, clock=clock,
                           store=SqliteStateStore(tmp_path / "w.sqlite"))
    third.open([_spec(INDEX), _spec(USER)])
    assert third.sources.retired[c2] and third.children.children[c2].dropped
    site.service, site.answer = third, [C1, C2]
    epoch(third, clock, site)
    assert not third.sources.retired[c2]
    assert third.stats.get("sources/relisted") == 1
    third.close()


def test_an_index_naming_new_children_is_not_silent(tmp_path):
    # An index has no entries of its own: the new children it names are its news. One that
    # rotates a new child in at every fetch never retires as silent; one that lists the same
    # children does (WHITTLE_RETIRE_AFTER), and is back the first time it names a new one.
    service, clock, site = start(tmp_path, WHITTLE_RETIRE_AFTER=3000.0,
                                 WHITTLE_RETIRE_PROBE=600.0)
    crawl_all(service, site)
    for day in range(8):                         # 8 epochs of 600 s: past the 3,000 s
        url = f"{HOST}/news-day-{day}.xml"
        site.answer = [url, USER]
        epoch(service, clock, site)
        service.add_source(_spec(url))
    assert not service.sources.retired[0]
    for _ in range(8):                           # the same listing from now on
        epoch(service, clock, site)
    assert service.sources.retired[0]
    site.answer = [f"{HOST}/news-day-8.xml", USER]
    for _ in range(3):                           # its next probe reads the new listing
        epoch(service, clock, site)
    assert not service.sources.retired[0]
    assert service.stats.get("sources/revived") == 1
    service.close()


def _reopen(service, clock, site):
    """The crawl started again on the same state file (a kill -9 after ``service``'s last
    checkpoint, or a normal stop: whatever it wrote)."""
    again = RecrawlService(service.config, clock=clock, store=SqliteStateStore(service.store.path))
    again.open([_spec(INDEX), _spec(USER)])
    site.service = again
    return again


def test_a_304_after_a_partial_listing_counts_no_miss_across_a_restart(tmp_path):
    for stop in ("kill", "close"):
        service, clock, site = start(tmp_path / stop)
        crawl_all(service, site)
        c1, _ = (service.add_source(_spec(u)) for u in (C1, C2))
        site.answer = [C2, USER]
        epoch(service, clock, site)                  # C1: one miss
        site.answer = ("partial", [C2])              # read in part: C1 may be in the rest
        epoch(service, clock, site)
        assert service.children.children[c1].misses == 1
        service.checkpoint() if stop == "kill" else service.close()
        again = _reopen(service, clock, site)
        site.answer = "304"                          # repeats the partial listing: no miss
        for _ in range(3):
            epoch(again, clock, site)
        assert again.children.children[c1].misses == 1, stop
        assert not again.sources.retired[c1]
        site.answer = [C2, USER]                     # read whole again: misses count on
        epoch(again, clock, site)
        assert again.children.children[c1].misses == 2
        again.close()


def test_children_listed_before_the_spider_registered_them_survive_a_restart(tmp_path):
    # the index's answer is checkpointed (its ETag with it: the next fetch may be a 304)
    # before the spider registered the children it named; the crawl is killed then
    service, clock, site = start(tmp_path)
    crawl_all(service, site)                     # lists C1, C2 (unknown yet), USER
    assert set(service.children.awaiting) == {C1, C2}
    service.checkpoint()
    again = _reopen(service, clock, site)
    c1, c2 = again.source_id(C1), again.source_id(C2)
    assert c1 is not None and c2 is not None     # registered at the restore
    assert again.children.children[c1].parent == 0 == again.children.children[c2].parent
    assert not again.children.awaiting
    site.answer = "304"
    assert {c1, c2} <= set(epoch(again, clock, site))     # crawled
    site.answer = [C2, USER]                     # and retired once the index drops them
    for _ in range(3):
        epoch(again, clock, site)
    assert again.sources.retired[c1] and not again.sources.retired[c2]
    again.close()
    third = _reopen(again, clock, site)          # registered: not registered twice
    assert len(third.sources) == len(again.sources) and not third.children.awaiting
    third.close()


def test_a_child_awaiting_registration_put_on_the_source_list_at_a_restart_is_linked(
        tmp_path):
    service, clock, site = start(tmp_path)
    crawl_all(service, site)                     # lists C1, C2 (unknown yet), USER
    service.checkpoint()                         # killed before the spider registered them
    again = RecrawlService(service.config, clock=clock, store=SqliteStateStore(service.store.path))
    again.open([_spec(INDEX), _spec(USER), _spec(C1)])      # C1 put on the list meanwhile
    c1, c2 = again.source_id(C1), again.source_id(C2)
    assert again.children.children[c1].parent == 0 == again.children.children[c2].parent
    assert again.sources.listed[c1] and not again.children.awaiting
    again.close()


def test_only_http_urls_awaiting_registration_are_registered_at_a_restart(tmp_path):
    service, clock, site = start(tmp_path)
    site.answer = [C1, "mailto:news@s0.example", "not a url"]   # (a worker's garbage)
    crawl_all(service, site)
    service.checkpoint()
    again = _reopen(service, clock, site)
    assert again.source_id(C1) is not None
    assert len(again.sources) == 3               # the index, USER, C1
    again.close()
