"""What round-robin would have captured: the pure simulator on the same items."""

from __future__ import annotations

from scrapy_whittle import Problem, make_policy
from sim.feedweb import FeedWeb, simulate


def round_robin_utility(params, seed: int, budget: float, epochs: int, window: int,
                        start: str = "warm") -> float:
    web = FeedWeb(params, seed=seed, window=window, start=start)
    policy = make_policy("round_robin", Problem(n=params.n, period=params.period))
    return simulate(web, policy, budget, epochs)
