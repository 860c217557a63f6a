"""``PrometheusExporter``: the crawl's ``whittle/*`` stats on a Prometheus endpoint.

On with ``WHITTLE_PROMETHEUS_PORT`` (a port on 127.0.0.1, or ``host:port``; the
``monitoring`` extra installs ``prometheus-client``); the add-on installs it in
``EXTENSIONS`` (it is not configured without the setting). prometheus-client's own HTTP
server answers ``GET /metrics`` in a thread of its own, from a registry of this crawl's (not
the process-wide default one, so two crawls of one process never mix their series).

What a scrape reads is a snapshot taken on the reactor's thread every ``SNAPSHOT_EVERY``
seconds and when the crawl closes: the server's thread never touches the service's state
while the crawl changes it. The metrics (prefix ``whittle_``):

* ``crawls_total``, ``new_items_total`` (new stories), ``utility_total``, ``missed_items_total``
  (stories lost: the crawl's estimate, ``whittle/missed_items``), ``not_modified_total``,
  ``errors_total{kind}`` (``whittle/errors/<kind>``): counters;
* ``budget_used_ratio`` (cost spent over the completed epochs / budget x epochs: the
  service's ``budget_used()``, absent before the first epoch completes),
  ``throttled_hosts`` (``whittle/hosts/throttled``), ``sources``: gauges;
* ``discovery_delay_seconds``: a histogram of the delays from an entry's publication to its capture
  (the service's :class:`~scrapy_whittle.service.decisions.measures.DelayHistogram`, its bins summed
  to one bucket a decade: 1 s, 10 s ... 10^8 s). In a cluster process (no local service) the delays'
  ``delay/mean_s``, ``delay/median_s`` and ``delay/p90_s`` stats are gauges instead, as are they
  beside the histogram.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.utils.asyncio import create_looping_call

from scrapy_whittle.scrapy.sink import whittle_sink
from scrapy_whittle.scrapy.startup import crawl_start
from scrapy_whittle.service.decisions.measures import EDGES
from scrapy_whittle.service.sink import LocalSink

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

SNAPSHOT_EVERY = 1.0
PREFIX = "whittle/"
#: counter name -> its whittle/* stat
COUNTERS = {"crawls": "crawls", "new_items": "new_items", "utility": "utility",
            "missed_items": "missed_items", "not_modified": "not_modified"}
#: gauge name -> its whittle/* stat
GAUGES = {"throttled_hosts": "hosts/throttled", "sources": "sources",
          "delay_mean_seconds": "delay/mean_s", "delay_median_seconds": "delay/median_s",
          "delay_p90_seconds": "delay/p90_s"}
#: the histogram's bucket bounds: EDGES[1 + 10 j] = 10^j s (EDGES has ten bins a decade)
BUCKET_EDGES = tuple(range(1, len(EDGES), 10))


class Snapshot:
    """What one scrape shows: the whittle/* stats, the budget used, the delay histogram's
    cumulative bucket counts and sum (None without a local service)."""

    __slots__ = ("buckets", "budget_used", "delay_sum", "stats")

    def __init__(self, stats: dict[str, Any], budget_used: float | None = None,
                 buckets: list[tuple[str, int]] | None = None, delay_sum: float = 0.0) -> None:
        self.stats = stats
        self.budget_used = budget_used
        self.buckets = buckets
        self.delay_sum = delay_sum


class WhittleCollector:
    """A prometheus-client collector of the latest :class:`Snapshot`."""

    def __init__(self) -> None:
        self.snapshot = Snapshot({})

    def collect(self):
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        snap = self.snapshot                    # one reference: replaced whole, never changed
        stats = snap.stats
        for name, key in COUNTERS.items():
            yield CounterMetricFamily(f"whittle_{name}", f"whittle/{key}",
                                      value=_number(stats.get(key, 0)))
        errors = CounterMetricFamily("whittle_errors", "whittle/errors/<kind>",
                                     labels=["kind"])
        for key, value in sorted(stats.items()):
            if key.startswith("errors/"):
                errors.add_metric([key[len("errors/"):]], _number(value))
        yield errors
        for name, key in GAUGES.items():
            value = _number(stats.get(key, math.nan))
            if not math.isnan(value):
                yield GaugeMetricFamily(f"whittle_{name}", f"whittle/{key}", value=value)
        if snap.budget_used is not None:
            yield GaugeMetricFamily("whittle_budget_used_ratio",
                                    "cost spent over the completed epochs / (budget x epochs)",
                                    value=snap.budget_used)
        if snap.buckets is not None:
            yield HistogramMetricFamily(
                "whittle_discovery_delay_seconds",
                "seconds from an entry's publication to its capture",
                buckets=snap.buckets, sum_value=snap.delay_sum)


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


class PrometheusExporter:
    """See the module docstring."""

    def __init__(self, crawler: Crawler, listen: tuple[str, int]) -> None:
        self.crawler = crawler
        self.listen = listen
        self.collector = WhittleCollector()
        self.server = None
        self.thread = None
        self._task = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> PrometheusExporter:
        config = crawl_start(crawler).config
        if config.prometheus_listen is None:
            raise NotConfigured      # without a message: Scrapy would warn of it
        ext = cls(crawler, config.prometheus_listen)
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    @property
    def port(self) -> int | None:
        """The port served (the one chosen when the setting gives 0)."""
        return None if self.server is None else self.server.server_address[1]

    def spider_opened(self, spider=None) -> None:
        from prometheus_client import CollectorRegistry, start_http_server

        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.collector)
        host, port = self.listen
        try:
            self.server, self.thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:       # the crawl goes on without its endpoint
            self.whittle_stats().inc("errors/prometheus_listen")
            logger.error("WHITTLE_PROMETHEUS_PORT (%r): cannot listen on %s:%d (%s): no "
                         "Prometheus endpoint in this crawl", self.crawler.settings.get(
                             "WHITTLE_PROMETHEUS_PORT"), host, port, exc)
            return
        logger.info("Prometheus metrics at http://%s:%d/metrics", host, self.port)
        self.snapshot()
        self._task = create_looping_call(self.snapshot)
        self._task.start(SNAPSHOT_EVERY, now=False)

    def whittle_stats(self):
        """The crawl's ``whittle/*`` counts: the local service's, or the cluster process's."""
        return whittle_sink(self.crawler).stats

    def snapshot(self) -> None:
        """Copy what the next scrapes show (on the reactor's thread)."""
        stats = self.crawler.stats.get_stats()
        values = {k[len(PREFIX):]: v for k, v in stats.items() if k.startswith(PREFIX)}
        sink = whittle_sink(self.crawler)
        if not isinstance(sink, LocalSink):     # a cluster process: the stats alone
            self.collector.snapshot = Snapshot(values)
            return
        service = sink.service                  # its measures too
        values.update(service.stats.values)     # newer than the collector's copy
        delays = service.outcomes.delays
        cumulative = delays.counts.cumsum()
        buckets = [(f"{EDGES[k]:g}", int(cumulative[k - 1])) for k in BUCKET_EDGES]
        buckets.append(("+Inf", int(cumulative[-1])))
        self.collector.snapshot = Snapshot(values, service.budget_used(), buckets,
                                           delays.seconds)

    def spider_closed(self, spider=None, reason=None) -> None:
        if self._task is not None and self._task.running:
            self._task.stop()
        if self.server is not None:
            self.snapshot()
            self.server.shutdown()
            self.server.server_close()
            self.thread.join(5)
            self.server = None
