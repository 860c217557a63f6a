"""What round-robin would have done: the pure simulator on the same items and budget."""

from __future__ import annotations

from scrapy_whittle import Problem, make_policy
from sim.feedweb import FeedWeb, simulate


def round_robin(params, seed: int, budget: float, epochs: int, window: int,
                start: str = "warm", until: float | None = None) -> dict[str, float]:
    """Round-robin polling for ``epochs`` epochs (crawls at their starts) of the web of
    ``params`` and ``seed``: the utility captured and ``FeedWeb.user_measures`` up to
    ``until`` (default the end of the last epoch)."""
    web = FeedWeb(params, seed=seed, window=window, start=start)
    policy = make_policy("round_robin", Problem(n=params.n, period=params.period))
    utility = simulate(web, policy, budget, epochs)
    until = epochs * params.period if until is None else until
    return {"utility": utility, **web.user_measures(until)}
