"""Every policy a user can name in WHITTLE_POLICY runs through the whole Scrapy stack."""

from __future__ import annotations

import pytest
import pytest_twisted
from scrapy import signals

from scrapy_whittle.scrapy.sink import whittle_service
from scrapy_whittle.service.config import InvalidSetting
from scrapy_whittle.service.state.store import FILE_NAME
from tests.scrapy.conftest import VirtualWeb, make_crawler, run, whittle
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
    web = VirtualWeb(n=8)
    settings = dict(WHITTLE_SOURCES=web.feeds(8), WHITTLE_POLICY=policy,
                    WHITTLE_POLICY_OPTIONS=options, WHITTLE_BUDGET=2, WHITTLE_PERIOD=900,
                    WHITTLE_MAX_EPOCHS=6, JOBDIR=str(tmp_path / "job"),
                    WHITTLE_CLOCK=web.clock)
    try:
        box = keep_scheduler(crawler := make_crawler(**settings))
        w = whittle(await run(crawler))
        first = box["scheduler"].service.policy
        box = keep_scheduler(again := make_crawler(**{**settings, "WHITTLE_MAX_EPOCHS": 1}))
        restored = {}

        def opened(spider):
            restored["policy"] = whittle_service(again).policy
            restored["global"] = restored["policy"].global_state()
            restored["rows"] = restored["policy"].export_rows(range(8))

        again.signals.connect(opened, signal=signals.spider_opened, weak=False)
        await run(again)
    finally:
        await web.stop()
    if policy in ("nutch", "miniflux"):       # they crawl only the feeds that are due
        assert 8 <= w["crawls"] <= 12 and w["budget_used"] <= 1.0 + 1e-9, w
    else:
        assert w["crawls"] == 12 and w["budget_used"] == pytest.approx(1.0), w
    assert not any(k.startswith("errors/") for k in w), w
    assert (tmp_path / "job" / FILE_NAME).exists()
    assert first.n == 8
    # the second run starts from what the first learned (rows and global state)
    assert restored["rows"].tobytes() == first.export_rows(range(8)).tobytes()
    assert restored["global"]["rng"] == first.global_state()["rng"]
