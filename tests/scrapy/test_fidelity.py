"""The same scenario through the pure simulator and through the full Scrapy stack (scheduler,
downloader, middleware, feed parsing) against sim.serve: with the oracle Whittle policy both
capture the same utility within 5%.

tcns2018 (Table I of *Whittle Index Policy for Crawling Ephemeral Content*, IEEE TCNS 2018),
M = 1, served with one time unit = one second of the crawl's simulated clock, which the
server shares: the crawl takes as long as its downloads and parsing, and crawls happen at
exact epoch instants. The oracle's choices do not depend on what crawls find, so the pure
simulator in deterministic mode gives the expected utility of exactly the schedule Scrapy
follows; ``sim.web.feedweb.simulate`` replays the very items the server published.
"""

import numpy as np
import pytest
import pytest_twisted
from scrapy import signals

from scrapy_whittle.core.policies import make_policy
from scrapy_whittle.scrapy.sink import whittle_service
from scrapy_whittle.service.clock import SimulatedClock
from sim.serve import start_server
from sim.web.feedweb import FeedWeb, simulate
from sim.web.scenarios import make_scenario
from tests.scrapy.conftest import make_crawler, run, whittle

PERIOD = 1.0      # simulated seconds per epoch (speed 1, one time unit per epoch)
EPOCHS = 20


def pure_expected(epochs: int) -> float:
    sc = make_scenario("tcns2018", budget=1.0, stochastic=False)
    env = sc.make_env()
    env.reset(seed=0)
    policy = make_policy("oracle", sc.problem)
    total = 0.0
    for k in range(epochs):
        obs, reward, *_ = env.step(policy.select(k, sc.budget))
        policy.observe(obs)
        total += float(reward)
    return total


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_scrapy_stack_matches_pure_simulator():
    clock = SimulatedClock(start=1_700_000_000.0)
    server = start_server("tcns2018", speed=1.0 / PERIOD, unit=1.0, seed=3, window=600,
                          clock=clock)
    try:
        urls = [f"{server.url}/feed/{i}.xml" for i in range(4)]
        crawler = make_crawler(
            WHITTLE_SOURCES=urls, WHITTLE_POLICY="oracle",
            WHITTLE_ORACLE_PARAMS=server.resource.params(server.url), WHITTLE_BUDGET=1,
            WHITTLE_PERIOD=PERIOD, WHITTLE_ENGAGEMENT_SCALE=1000, WHITTLE_MAX_EPOCHS=EPOCHS,
            WHITTLE_CLOCK=clock, DOWNLOAD_TIMEOUT=10)

        def opened(spider):                  # virtual time 0 = the service's epoch origin
            server.clock.reset(whittle_service(crawler).origin)

        crawler.signals.connect(opened, signal=signals.spider_opened, weak=False)
        w = whittle(await run(crawler))
    finally:
        await server.stop()
    assert w["crawls"] == EPOCHS and w["fetched"] == EPOCHS, w
    scrapy_utility = w["utility"]
    expected = pure_expected(EPOCHS)
    assert scrapy_utility == pytest.approx(expected, rel=0.05), (scrapy_utility, expected)
    # the same items, crawled at exact epoch instants
    sc = make_scenario("tcns2018", budget=1.0)
    replay = simulate(FeedWeb(sc.params, seed=3, window=600),
                      make_policy("oracle", sc.problem), 1.0, EPOCHS)
    assert scrapy_utility == pytest.approx(replay, rel=0.05), (scrapy_utility, replay)
    print("fidelity", scrapy_utility, expected, replay)
    assert server.web.totals()["captured"] == pytest.approx(scrapy_utility, rel=0.01)
    assert np.isfinite(scrapy_utility) and scrapy_utility > 0


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_decision_steps_in_scrapy_are_the_simulators_steps():
    """WHITTLE_STEP = T / 4 and two crawls an epoch: Scrapy hands out a crawl every other
    step, at the step's instant, as the pure simulator deciding four times an epoch with the
    same credit does; the oracle, ranking by the index of a quarter epoch, chooses the same."""
    steps, budget = 4, 2
    clock = SimulatedClock(start=1_700_000_000.0)
    server = start_server("tcns2018", speed=1.0 / PERIOD, unit=1.0, seed=3, window=600,
                          clock=clock)
    sent = []
    try:
        urls = [f"{server.url}/feed/{i}.xml" for i in range(4)]
        crawler = make_crawler(
            WHITTLE_SOURCES=urls, WHITTLE_POLICY="oracle",
            WHITTLE_ORACLE_PARAMS=server.resource.params(server.url), WHITTLE_BUDGET=budget,
            WHITTLE_PERIOD=PERIOD, WHITTLE_STEP=PERIOD / steps,
            WHITTLE_ENGAGEMENT_SCALE=1000, WHITTLE_MAX_EPOCHS=EPOCHS, WHITTLE_CLOCK=clock,
            DOWNLOAD_TIMEOUT=10)

        def opened(spider):
            server.clock.reset(whittle_service(crawler).origin)

        def scheduled(request, spider):
            crawl = request.meta.get("whittle_crawl")
            if crawl is not None:
                sent.append(crawl.sent_at - whittle_service(crawler).origin)

        crawler.signals.connect(opened, signal=signals.spider_opened, weak=False)
        crawler.signals.connect(scheduled, signal=signals.request_reached_downloader,
                                weak=False)
        w = whittle(await run(crawler))
    finally:
        await server.stop()
    assert w["crawls"] == budget * EPOCHS, w
    # a crawl every other step: at 1/4, 3/4, 5/4, ... of an epoch, never two at once
    assert sorted(sent) == pytest.approx([PERIOD * (2 * j + 1) / steps
                                          for j in range(budget * EPOCHS)], abs=1e-6)
    sc = make_scenario("tcns2018", budget=1.0)
    replay = simulate(FeedWeb(sc.params, seed=3, window=600),
                      make_policy("oracle", sc.problem, resolution=1 / steps), budget, EPOCHS,
                      steps=steps)
    assert w["utility"] == pytest.approx(replay, rel=0.05), (w["utility"], replay)
