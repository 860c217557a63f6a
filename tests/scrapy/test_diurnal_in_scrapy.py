"""news-diurnal served over HTTP, and diurnal-whittle learning rhythms through Scrapy."""

from __future__ import annotations

import json
import pickle
import time
import urllib.request

import numpy as np
import pytest
import pytest_twisted

from scrapy_whittle.periodic import arrivals_from_bins
from scrapy_whittle.sources import load_oracle, load_oracle_profiles
from tests.scrapy.conftest import Server, make_crawler, run, whittle
from tests.scrapy.test_crawl import feeds, keep_scheduler


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
    assert per.k == 24 and per.phase0 == 0 and np.all(per.u >= 0)


@pytest_twisted.ensureDeferred
async def test_diurnal_whittle_learns_rhythms_through_scrapy(diurnal_server, tmp_path):
    crawler = make_crawler(WHITTLE_SOURCES=feeds(diurnal_server, 12),
                           WHITTLE_POLICY="diurnal-whittle",
                           WHITTLE_POLICY_OPTIONS={"day": 24.0}, WHITTLE_BUDGET=3,
                           WHITTLE_PERIOD=0.25, CLOSESPIDER_TIMEOUT=2.5,
                           JOBDIR=str(tmp_path / "job"))
    box = keep_scheduler(crawler)
    w = whittle(await run(crawler))
    assert w["crawls"] >= 12 and not any(k.startswith("errors/") for k in w), w
    policy = box["scheduler"].policy
    assert policy.profile.items.sum() > 0
    assert np.isfinite(policy.time_origin)
    state = pickle.loads((tmp_path / "job" / "whittle.state.pickle").read_bytes())
    assert state["policy"]["profile"]["items"].sum() == policy.profile.items.sum()


def test_malformed_oracle_profile_names_the_setting():
    from scrapy.exceptions import NotConfigured

    good = {"http://a/feed": {"rate": 1, "mean_utility": 1, "decay": 0,
                              "profile": {"bins": [1, 1], "bin_seconds": 60}}}
    assert load_oracle_profiles(good)["http://a/feed"] == ([1.0, 1.0], 60.0, 0.0)
    assert load_oracle_profiles({"http://b/feed": {"rate": 1}}) == {}
    for bad in ({"bins": [1, -1], "bin_seconds": 60}, {"bins": [1]},
                {"bins": "x", "bin_seconds": 60}, {"bins": [1], "bin_seconds": 0}):
        with pytest.raises(NotConfigured, match="WHITTLE_ORACLE_PARAMS"):
            load_oracle_profiles({"http://a/feed": {"profile": bad}})
