"""Crawl policies, selectable by name (``WHITTLE_POLICY``, ``sim.bench --policy``).

A name means the same policy everywhere: ``whittle`` is the Whittle index on parameters it
learns, ``oracle`` the Whittle index on the true parameters it is given (as
``diurnal-whittle`` learns daily rhythms and ``diurnal-oracle`` is given them).

Modules are imported only when their policy is asked for, so ``dqn`` (torch) costs nothing
to a crawl that does not use it.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from scrapy_whittle.core.policies.base import Policy
from scrapy_whittle.core.problem import Problem

# name -> "module:Class" (relative to scrapy_whittle.core.policies)
POLICIES: dict[str, str] = {
    "whittle": "whittle:AdaptiveWhittlePolicy",
    "oracle": "oracle:WhittlePolicy",
    "greedy": "simple:GreedyPolicy",
    "uniform": "simple:UniformPolicy",
    "round_robin": "simple:RoundRobinPolicy",
    "static": "static:StaticPolicy",
    "nutch": "nutch:NutchAdaptivePolicy",
    "miniflux": "miniflux:MinifluxPolicy",
    "newsblur": "newsblur:NewsBlurPolicy",
    "commafeed": "commafeed:CommaFeedPolicy",
    "stormcrawler": "stormcrawler:StormCrawlerPolicy",
    "fixed-interval": "fixed_interval:FixedIntervalPolicy",
    "thompson": "thompson:ThompsonPolicy",
    "thompson-whittle": "thompson:ThompsonWhittlePolicy",
    "lspe": "lspe:LSPEPolicy",
    "dqn": "dqn:DQNPolicy",
    "diurnal-oracle": "diurnal:DiurnalOraclePolicy",
    "diurnal-whittle": "diurnal:DiurnalWhittlePolicy",
}

#: policy name -> (the package its module imports beyond the core's, the extra of
#: scrapy-whittle that installs it), so that a crawl can name what to install before it starts
NEEDS_EXTRA: dict[str, tuple[str, str]] = {"dqn": ("torch", "dqn")}

#: other names accepted for a policy -> its name in ``POLICIES``
ALIASES: dict[str, str] = {"adaptive-whittle": "whittle"}


def canonical_name(name: str) -> str:
    """The name in ``POLICIES`` of the policy called ``name`` (itself, unless an alias)."""
    return ALIASES.get(name, name)


def policy_class(name: str) -> type[Policy]:
    try:
        target = POLICIES[canonical_name(name)]
    except KeyError:
        known = ", ".join(sorted(POLICIES))
        raise ValueError(f"unknown policy {name!r}; known policies: {known}") from None
    module, cls = target.split(":")
    try:
        mod = importlib.import_module(f"scrapy_whittle.core.policies.{module}")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("scrapy_whittle"):
            raise ValueError(f"policy {name!r} is not available in this version") from exc
        raise ValueError(f"policy {name!r} needs the package {exc.name!r}; install it "
                         f"(for dqn: pip install 'scrapy-whittle[dqn]' -c constraints.txt)"
                         ) from exc
    return getattr(mod, cls)


def make_policy(name: str, problem: Problem, rng: np.random.Generator | int | None = None,
                **options: Any) -> Policy:
    """Build the policy called ``name`` for ``problem``; ``options`` go to its constructor."""
    return policy_class(name)(problem, rng=rng, **options)


__all__ = ["ALIASES", "NEEDS_EXTRA", "POLICIES", "Policy", "canonical_name", "make_policy",
           "policy_class"]
