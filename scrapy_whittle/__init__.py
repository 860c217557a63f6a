"""scrapy-whittle: re-crawl scheduling for news feeds with the Whittle index and friends.

The pure core (no Scrapy import): :func:`whittle_index`, :func:`upper_bound`, the policies
(:func:`make_policy`) and the data they exchange (:class:`Problem`, :class:`Observation`).
The Scrapy glue (``Addon``, ``WhittleScheduler``, ``FeedObserverMiddleware``, ``FeedSpider``)
is imported lazily so that the core stays importable without Scrapy's engine.
"""

from __future__ import annotations

import importlib
from typing import Any

from scrapy_whittle.bound import UpperBound, upper_bound
from scrapy_whittle.index import IndexTable, whittle_index
from scrapy_whittle.observation import Observation
from scrapy_whittle.policies import POLICIES, Policy, make_policy
from scrapy_whittle.problem import Problem, SourceParams

__version__ = "0.1.0"

_LAZY = {
    "Addon": "scrapy_whittle.addon",
    "WhittleScheduler": "scrapy_whittle.scheduler",
    "FeedObserverMiddleware": "scrapy_whittle.middleware",
    "RetryAfterMiddleware": "scrapy_whittle.middleware",
    "FeedSpider": "scrapy_whittle.spiders",
    "report_value": "scrapy_whittle.feedback",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'scrapy_whittle' has no attribute {name!r}")


__all__ = [
    "POLICIES", "IndexTable", "Observation", "Policy", "Problem", "SourceParams", "UpperBound",
    "make_policy", "upper_bound", "whittle_index", *_LAZY,
]
