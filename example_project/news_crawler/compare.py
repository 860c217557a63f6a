"""What a feed reader's rule would have done: the pure simulator on the same items and budget."""

from __future__ import annotations

from scrapy_whittle import Problem, make_policy
from sim.web.feedweb import FeedWeb, simulate


def rule(name: str, params, seed: int, budget: float, epochs: int, window: int,
         start: str = "warm", until: float | None = None, steps: int = 1) -> dict[str, float]:
    """Policy ``name`` (``round_robin``, ``miniflux``, ...) for ``epochs`` epochs of the web of
    ``params`` and ``seed``, deciding ``steps`` times an epoch within ``budget`` crawls an
    epoch: the utility captured and ``FeedWeb.user_measures`` up to ``until`` (default the end
    of the last epoch)."""
    web = FeedWeb(params, seed=seed, window=window, start=start)
    policy = make_policy(name, Problem(n=params.n, period=params.period))
    utility = simulate(web, policy, budget, epochs, steps=steps)
    until = epochs * params.period if until is None else until
    return {"utility": utility, **web.user_measures(until)}


def round_robin(params, seed: int, budget: float, epochs: int, window: int,
                start: str = "warm", until: float | None = None) -> dict[str, float]:
    """Round-robin polling for ``epochs`` epochs (crawls at their starts)."""
    return rule("round_robin", params, seed, budget, epochs, window, start, until)
