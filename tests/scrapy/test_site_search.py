"""A crawl started from sites' addresses (``sim.serve --sites``): it finds the feeds each site
links (in its page's head, its Link headers, at a usual path, in its robots.txt) and no decoy,
crawls them in the sites' place, warns once of the site without feeds, does not search again
after a restart (a site listed under an address that redirects included), and searches a site
again when all its feeds died."""

from __future__ import annotations

import logging

import pytest_twisted

from scrapy_whittle.service.sources.site_table import SiteTable
from tests.scrapy.conftest import VirtualWeb, make_crawler, run, whittle

N, SITES = 36, 9


def gone(web_seed: int = 0) -> str:
    """The fates making every feed of site 2 (a header site) answer 410 Gone: it is searched
    again."""
    from sim.web.kinds import SourceKinds
    from sim.web.sites import SimSites

    members = SimSites(SourceKinds(N, "mix"), SITES, web_seed).members[2]
    return ",".join(f"{i}:410" for i in members)


def settings(web: VirtualWeb, sources: list[str], jobdir, **extra) -> dict:
    return dict(WHITTLE_SOURCES=sources, WHITTLE_POLICY="round_robin", WHITTLE_BUDGET=60,
                WHITTLE_PERIOD=3600, WHITTLE_MAX_EPOCHS=3, WHITTLE_CLOCK=web.clock,
                WHITTLE_RETIRE_PROBE=1800, JOBDIR=str(jobdir), **extra)


def feedless_warnings(caplog, site: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and site in r.getMessage()]


@pytest_twisted.ensureDeferred
async def test_a_crawl_from_sites_finds_their_feeds_and_keeps_them(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="scrapy_whittle")
    web = VirtualWeb(n=N, kinds="mix", sites=SITES, fates=gone())
    hosts = web.server.resource.sites
    # site 0 is listed under an old address of its page, which redirects permanently
    truth = {f"{u}/home" if j == 0 else f"{u}/": hosts.sites.linked(j, web.url)
             for j, u in enumerate(hosts.urls)}
    styles = {hosts.sites.style(j) for j in range(len(hosts.urls))}
    feedless = [s for s, feeds in truth.items() if not feeds]
    jobdir = tmp_path / "job"
    try:
        first = whittle(await run(make_crawler(**settings(web, list(truth), jobdir))))
        caplog_first = feedless_warnings(caplog, feedless[0])
        caplog.clear()
        again = whittle(await run(make_crawler(**settings(web, list(truth), jobdir))))
    finally:
        await web.stop()
    assert styles == {"links", "header", "well-known", "none"}
    table = SiteTable.in_jobdir(jobdir)
    table.load()
    found = {site: sorted(f.url for f in record.feeds) for site, record in table.sites.items()}
    assert found == {site: sorted(feeds) for site, feeds in truth.items()}   # [] kept too
    n_feeds = sum(len(feeds) for feeds in truth.values())
    assert first["site_search/sites"] == len(truth)
    assert first["site_search/feeds_found"] >= n_feeds       # site 2's again, too
    assert first["site_search/sites_without_feeds"] == 1
    assert len(caplog_first) == 1 and "names no feed" in caplog_first[0]
    # the feeds were crawled in the sites' place: entries found, no site page fetched twice
    assert first["new_items"] > 0
    assert first["sources"] == n_feeds
    assert "errors/not_a_feed" not in first
    # site 2's feeds answered 410 Gone: searched again once its probe time had passed
    assert first["site_search/searched_again"] >= 1
    # a restart crawls the feeds found before: only the site without feeds is searched
    assert again["site_search/sites"] == 1
    assert again["site_search/sites_without_feeds"] == 1
    assert again["sources"] == n_feeds
    assert again["new_items"] > 0


@pytest_twisted.ensureDeferred
async def test_site_search_off_keeps_a_page_an_error(tmp_path):
    web = VirtualWeb(n=8, sites=2)
    sites = [f"{u}/" for u in web.server.resource.sites.urls]
    try:
        w = whittle(await run(make_crawler(**settings(web, sites, tmp_path / "job",
                                                      WHITTLE_SITE_SEARCH=False))))
    finally:
        await web.stop()
    assert w["errors/not_a_feed"] >= len(sites)
    assert not any(k.startswith("site_search/") for k in w)


@pytest_twisted.ensureDeferred
async def test_a_list_read_again_searches_no_site_twice(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="scrapy_whittle")
    web = VirtualWeb(n=12, kinds="mix", sites=3)
    hosts = web.server.resource.sites
    truth = {f"{u}/": hosts.sites.linked(j, web.url) for j, u in enumerate(hosts.urls)}
    listed = tmp_path / "sites.txt"
    listed.write_text("".join(f"{site}\n" for site in truth))
    try:
        # (no site is due to be searched again within the crawl: what is counted is the
        # list's reads)
        w = whittle(await run(make_crawler(**{**settings(
            web, str(listed), tmp_path / "job", WHITTLE_SOURCES_REFRESH=600),
            "WHITTLE_RETIRE_PROBE": 4 * 3600})))
    finally:
        await web.stop()
    feedless = [s for s, feeds in truth.items() if not feeds]
    assert w["site_search/sites"] == len(truth)             # once each, over many reads
    assert len(feedless_warnings(caplog, feedless[0])) == 1
    assert w["sources"] == sum(len(feeds) for feeds in truth.values())
    assert "sources/rejoined" not in w
