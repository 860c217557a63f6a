"""The Prometheus endpoint (``WHITTLE_PROMETHEUS_PORT``): a crawl of the simulated web
scraped over HTTP as Prometheus does, its text parsed by prometheus-client's own parser and
held against the crawl's ``whittle/*`` stats."""

from __future__ import annotations

import socket
import urllib.request

import pytest
import pytest_twisted
from prometheus_client.parser import text_string_to_metric_families
from scrapy import signals

from scrapy_whittle.scrapy.prometheus import PrometheusExporter
from scrapy_whittle.scrapy.sink import whittle_service
from scrapy_whittle.service.config import InvalidSetting, WhittleConfig
from tests.scrapy.conftest import VirtualWeb, make_crawler, run, whittle

EXPORTER = "scrapy_whittle.scrapy.prometheus.PrometheusExporter"
N = 20


def exporter_of(crawler) -> PrometheusExporter:
    return next(m for m in crawler.extensions.middlewares if isinstance(m, PrometheusExporter))


def scrape(port: int) -> dict[str, list]:
    """metric family name -> its samples, as Prometheus reads /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


@pytest_twisted.ensureDeferred
async def test_a_crawl_is_scraped_with_its_stats_and_delays():
    """The add-on installs the exporter when the setting is set. Scraped mid-crawl (half-way
    through its epochs, from the reactor's thread, so that the crawl stands still meanwhile):
    every metric is the service's stat of that moment."""
    web = VirtualWeb(n=N, seed=1)
    crawler = make_crawler(WHITTLE_SOURCES=web.feeds(N), WHITTLE_CLOCK=web.clock,
                           WHITTLE_BUDGET=4, WHITTLE_PERIOD=3600.0, WHITTLE_MAX_EPOCHS=24,
                           WHITTLE_PROMETHEUS_PORT=0, ADDONS={"scrapy_whittle.Addon": 0})
    scraped = {}

    def item(item, response, spider):
        service = whittle_service(crawler)
        if "metrics" in scraped or service.stats.get("epochs") < 12:
            return
        exporter = exporter_of(crawler)
        exporter.snapshot()
        scraped.update(port=exporter.port, metrics=scrape(exporter.port),
                       stats=dict(service.stats.values), budget_used=service.budget_used())

    crawler.signals.connect(item, signal=signals.item_scraped, weak=False)
    try:
        await run(crawler)
    finally:
        await web.stop()
    metrics, stats = scraped["metrics"], scraped["stats"]

    def value(name: str, **labels) -> float:
        (sample,) = [s for s in metrics[name] if s.name.endswith(("_total", name))
                     and s.labels == labels]
        return sample.value

    assert stats["crawls"] > 0 and stats["new_items"] > 0
    assert value("whittle_crawls") == stats["crawls"]
    assert value("whittle_new_items") == stats["new_items"]
    assert value("whittle_utility") == pytest.approx(stats["utility"])
    assert value("whittle_missed_items") == pytest.approx(stats.get("missed_items", 0))
    assert value("whittle_budget_used_ratio") == scraped["budget_used"] > 0
    errors = {k[len("errors/"):]: v for k, v in stats.items() if k.startswith("errors/")}
    assert {s.labels["kind"]: s.value for s in metrics["whittle_errors"]
            if s.name == "whittle_errors_total"} == errors
    # the histogram: cumulative buckets a decade apart, their count = the dated captures
    hist = {s.labels.get("le"): s.value for s in metrics["whittle_discovery_delay_seconds"]
            if s.name.endswith("_bucket")}
    counts = [hist[le] for le in sorted(hist, key=float)]
    assert counts == sorted(counts) and counts[-1] > 0
    # the median lies in the first bucket that holds half the delays
    bounds = sorted(hist, key=float)
    k = next(i for i, c in enumerate(counts) if c >= counts[-1] / 2)
    lower = float(bounds[k - 1]) if k else 0.0
    assert lower <= stats["delay/median_s"] <= float(bounds[k]), (hist, stats)
    (total,) = [s.value for s in metrics["whittle_discovery_delay_seconds"]
                if s.name.endswith("_sum")]
    assert total / counts[-1] == pytest.approx(stats["delay/mean_s"], rel=1e-6)
    # closed with the crawl: nothing listens there any more
    with pytest.raises(OSError):
        scrape(scraped["port"])


@pytest_twisted.ensureDeferred
async def test_a_port_in_use_is_an_error_the_crawl_survives():
    web = VirtualWeb(n=N, seed=1)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        crawler = make_crawler(WHITTLE_SOURCES=web.feeds(N), WHITTLE_CLOCK=web.clock,
                               WHITTLE_BUDGET=4, WHITTLE_PERIOD=3600.0, WHITTLE_MAX_EPOCHS=2,
                               WHITTLE_PROMETHEUS_PORT=taken.getsockname()[1],
                               EXTENSIONS={EXPORTER: 500})
        try:
            stats = whittle(await run(crawler))
        finally:
            await web.stop()
    assert stats["errors/prometheus_listen"] == 1 and stats["crawls"] > 0


@pytest.mark.parametrize(("value", "listen"), [
    (9410, ("127.0.0.1", 9410)), ("9410", ("127.0.0.1", 9410)), (0, ("127.0.0.1", 0)),
    ("0.0.0.0:9410", ("0.0.0.0", 9410)), (None, None), ("", None)])
def test_the_setting_reads_a_port_or_an_address(value, listen):
    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": 1,
                                          "WHITTLE_PROMETHEUS_PORT": value})
    assert config.prometheus_listen == listen


@pytest.mark.parametrize("value", [-1, 65536, "abc", 1.5, "host:", True])
def test_a_bad_port_is_refused_by_name(value):
    with pytest.raises(InvalidSetting, match=r"^WHITTLE_PROMETHEUS_PORT \("):
        WhittleConfig.from_settings({"WHITTLE_BUDGET": 1, "WHITTLE_PROMETHEUS_PORT": value})
