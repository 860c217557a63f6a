"""Every policy a user can name in WHITTLE_POLICY runs through the whole Scrapy stack."""

from __future__ import annotations

import pytest
import pytest_twisted

from scrapy_whittle.settings import InvalidSetting
from tests.scrapy.conftest import make_crawler, run, whittle
from tests.scrapy.test_crawl import feeds, keep_scheduler


@pytest.mark.parametrize("policy", ["whittle", "thompson-whittle", "thompson", "lspe", "dqn",
                                    "nutch", "miniflux", "uniform", "greedy-needs-oracle",
                                    "diurnal-whittle"])
@pytest_twisted.ensureDeferred
async def test_policy_crawls_learns_and_saves_state(sim_server, tmp_path, policy):
    # a simulated day lasts 24 real seconds on the server (one simulated hour per second)
    options = {"hidden": (16, 8)} if policy == "dqn" else \
        {"day": 24.0} if policy == "diurnal-whittle" else {}
    if policy == "greedy-needs-oracle":
        # an oracle policy without WHITTLE_ORACLE_PARAMS cannot learn: the crawl refuses to
        # start, naming the setting, instead of crawling blind
        crawler = make_crawler(WHITTLE_SOURCES=feeds(sim_server, 8), WHITTLE_POLICY="greedy",
                               WHITTLE_BUDGET=2, WHITTLE_PERIOD=0.25, CLOSESPIDER_TIMEOUT=1)
        with pytest.raises(InvalidSetting, match=r"WHITTLE_POLICY \('greedy'\) needs"):
            await run(crawler)
        return
    crawler = make_crawler(WHITTLE_SOURCES=feeds(sim_server, 8), WHITTLE_POLICY=policy,
                           WHITTLE_POLICY_OPTIONS=options, WHITTLE_BUDGET=2,
                           WHITTLE_PERIOD=0.25, CLOSESPIDER_TIMEOUT=1.6,
                           JOBDIR=str(tmp_path / "job"))
    box = keep_scheduler(crawler)
    w = whittle(await run(crawler))
    assert w["crawls"] >= 8, w
    assert w["budget_used"] <= 1.0 + 1e-9
    assert not any(k.startswith("errors/") for k in w), w
    assert (tmp_path / "job" / "whittle.state.pickle").exists()
    assert box["scheduler"].policy.n == 8
