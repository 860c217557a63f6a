"""news-diurnal served over HTTP, and diurnal-whittle learning rhythms through Scrapy."""

from __future__ import annotations

import json
import time
import urllib.request

import numpy as np
import pytest
import pytest_twisted

from scrapy_whittle.core.periodic import arrivals_from_bins
from scrapy_whittle.service.config import InvalidSetting, WhittleConfig
from scrapy_whittle.service.recrawl import RecrawlService
from scrapy_whittle.service.sources.registry import load_oracle, load_oracle_profiles
from scrapy_whittle.service.state.store import FILE_NAME, SqliteStateStore
from tests.scrapy.conftest import Server, VirtualWeb, make_crawler, run, whittle
from tests.scrapy.test_crawl import keep_scheduler


@pytest.fixture(scope="module")
def diurnal_server():
    """12 news-diurnal feeds, one simulated hour per real second."""
    server = Server("--scenario", "news-diurnal", "--n", "12", "--speed", "3600",
                    "--seed", "0")
    yield server
    server.stop()


def test_params_carry_the_rhythm_for_an_oracle(diurnal_server):
    with urllib.request.urlopen(f"{diurnal_server.url}/params.json", timeout=5) as resp:
        doc = json.loads(resp.read())
    prof = doc["sources"][0]["profile"]
    assert len(prof["bins"]) == 96 and np.mean(prof["bins"]) == pytest.approx(1.0, abs=1e-5)
    assert prof["bin_seconds"] == pytest.approx(900 / 3600)     # 15 simulated minutes
    assert abs(prof["origin"] - time.time()) < 600
    params = load_oracle(doc)
    rhythms = load_oracle_profiles(doc)
    assert set(rhythms) == set(params)
    # what a rhythm-aware oracle in Scrapy would be built from, epochs of one simulated hour
    urls = [s["url"] for s in doc["sources"]]
    rate, xi, mu = (np.array([params[u][j] for u in urls]) for j in range(3))
    bins = np.array([rhythms[u][0] for u in urls])
    per = arrivals_from_bins(rate, xi, mu, bins, rhythms[urls[0]][1], 1.0,
                             origin=rhythms[urls[0]][2], start=rhythms[urls[0]][2])
    assert per.k == 24 and per.phase0 == 0 and np.all(per.u > 0)
    # a rhythm: every source's busiest hour brings clearly more than its quietest (the
    # scenario's day/night ratios are 1.5 to 16)
    assert np.all(per.u.max(axis=1) > 1.2 * per.u.min(axis=1))


@pytest_twisted.ensureDeferred
async def test_diurnal_whittle_learns_rhythms_through_scrapy(tmp_path):
    web = VirtualWeb("news-diurnal", n=12)          # a simulated hour per hour of crawl
    settings = dict(WHITTLE_SOURCES=web.feeds(12), WHITTLE_POLICY="diurnal-whittle",
                    WHITTLE_BUDGET=3, WHITTLE_PERIOD=3600, WHITTLE_MAX_EPOCHS=48,
                    WHITTLE_CLOCK=web.clock, JOBDIR=str(tmp_path / "job"))
    try:
        crawler = make_crawler(**settings)
        box = keep_scheduler(crawler)
        w = whittle(await run(crawler))
    finally:
        await web.stop()
    assert w["crawls"] == 3 * 48 and not any(k.startswith("errors/") for k in w), w
    policy = box["scheduler"].service.policy
    assert policy.profile.items.sum() > 0
    assert np.isfinite(policy.time_origin)
    # what it learned is in the store, and a restart finds it there
    config = WhittleConfig.from_settings(settings)
    again = RecrawlService(config, clock=web.clock,
                           store=SqliteStateStore(tmp_path / "job" / FILE_NAME))
    again.open([])
    assert again.policy.profile.items.sum() == policy.profile.items.sum()
    np.testing.assert_array_equal(again.policy.profile.coefficients(),
                                  policy.profile.coefficients())


def test_malformed_oracle_profile_names_the_setting():
    good = {"http://a/feed": {"rate": 1, "mean_utility": 1, "decay": 0,
                              "profile": {"bins": [1, 1], "bin_seconds": 60}}}
    assert load_oracle_profiles(good)["http://a/feed"] == ([1.0, 1.0], 60.0, 0.0)
    assert load_oracle_profiles({"http://b/feed": {"rate": 1}}) == {}
    for bad in ({"bins": [1, -1], "bin_seconds": 60}, {"bins": [1]},
                {"bins": "x", "bin_seconds": 60}, {"bins": [1], "bin_seconds": 0}):
        with pytest.raises(InvalidSetting, match="WHITTLE_ORACLE_PARAMS"):
            load_oracle_profiles({"http://a/feed": {"profile": bad}})


@pytest_twisted.ensureDeferred
async def test_diurnal_oracle_crawls_on_the_published_rhythms():
    web = VirtualWeb("news-diurnal", n=12)
    doc = web.server.resource.params(web.url)
    settings = dict(WHITTLE_SOURCES=web.feeds(12), WHITTLE_POLICY="diurnal-oracle",
                    WHITTLE_ORACLE_PARAMS=doc, WHITTLE_BUDGET=3, WHITTLE_PERIOD=3600,
                    WHITTLE_MAX_EPOCHS=30, WHITTLE_CLOCK=web.clock)
    try:
        crawler = make_crawler(**settings)
        box = keep_scheduler(crawler)
        w = whittle(await run(crawler))
    finally:
        await web.stop()
    assert w["crawls"] == 3 * 30 and not any(k.startswith("errors/") for k in w), w
    service = box["scheduler"].service
    periodic = service.policy.periodic
    # the rhythms it planned on are those published, epoch 0 at the crawl's start
    params, rhythms = load_oracle(doc), load_oracle_profiles(doc)
    urls = [service.url(i) for i in range(12)]
    rate, xi, mu = (np.array([params[u][j] for u in urls]) for j in range(3))
    bins = np.array([rhythms[u][0] for u in urls])
    expected = arrivals_from_bins(rate, xi, mu, bins, rhythms[urls[0]][1], 3600.0,
                                  origin=rhythms[urls[0]][2], start=service.origin)
    assert periodic.k == 24 and periodic.phase0 == 0
    np.testing.assert_allclose(periodic.u, np.roll(expected.u, -expected.phase0, axis=1))
    np.testing.assert_allclose(periodic.alpha, expected.alpha)


def test_diurnal_oracle_needs_a_rhythm_for_every_source():
    from scrapy_whittle.scrapy.startup import check_start

    doc = {"https://a.example/feed": {"rate": 1e-3, "mean_utility": 1, "decay": 1e-4}}
    with pytest.raises(InvalidSetting, match="no daily rhythm"):
        check_start({"WHITTLE_SOURCES": ["https://a.example/feed"], "WHITTLE_BUDGET": 1,
                     "WHITTLE_POLICY": "diurnal-oracle", "WHITTLE_ORACLE_PARAMS": doc})
