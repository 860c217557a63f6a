"""scrapy-whittle: re-crawl scheduling for news feeds with the Whittle index and friends.

The pure core (no Scrapy import): :func:`whittle_index`, :func:`upper_bound`, the policies
(:func:`make_policy`) and the data they exchange (:class:`Problem`, :class:`Observation`).
The Scrapy adapters (``Addon``, ``WhittleScheduler``, ``FeedObserverMiddleware``,
``FeedSpider``, ``report_value``) and the service's public names (``RecrawlService``,
``InvalidSetting``, ``SimulatedClock``) are imported lazily, so that the core stays importable
without Scrapy's engine.

The package is laid out by layer: ``core`` (maths, policies, estimators), ``feeds`` (parsing),
``service`` (the Scrapy-free re-crawl service), ``scrapy`` (the adapters), ``cluster`` (many
processes through Redis) and ``report``; each imports only the layers before it.
"""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import Any

from scrapy_whittle.core.bound import UpperBound, upper_bound
from scrapy_whittle.core.index import IndexTable, whittle_index
from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.policies import POLICIES, Policy, make_policy
from scrapy_whittle.core.problem import Problem, SourceParams

try:
    __version__ = metadata.version("scrapy-whittle")
except metadata.PackageNotFoundError:    # run from a source tree that was never installed
    __version__ = "0+unknown"

_LAZY = {
    "Addon": "scrapy_whittle.scrapy.addon",
    "WhittleScheduler": "scrapy_whittle.scrapy.scheduler",
    "FeedObserverMiddleware": "scrapy_whittle.scrapy.middleware",
    "RetryAfterMiddleware": "scrapy_whittle.scrapy.middleware",
    "DeliveryMiddleware": "scrapy_whittle.scrapy.delivery",
    "FeedSpider": "scrapy_whittle.scrapy.spiders",
    "report_value": "scrapy_whittle.scrapy.item_value",
    "InvalidSetting": "scrapy_whittle.service.config",
    "RecrawlService": "scrapy_whittle.service.recrawl",
    "SimulatedClock": "scrapy_whittle.service.clock",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'scrapy_whittle' has no attribute {name!r}")


__all__ = [
    "POLICIES", "IndexTable", "Observation", "Policy", "Problem", "SourceParams", "UpperBound",
    "make_policy", "upper_bound", "whittle_index", *_LAZY,
]
