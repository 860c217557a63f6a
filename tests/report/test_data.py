"""The crawl report's reading of a state file, on crawls driven without Scrapy: per-epoch
aggregates and errors, the index and plan of the rebuilt policy (or why there is none), a
store read while its crawl writes it, and never a write."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scrapy_whittle.report import ReportError, load_report
from scrapy_whittle.report.table import text
from scrapy_whittle.service.clock import SimulatedClock
from scrapy_whittle.service.state.store import FILE_NAME, SqliteStateStore
from tests.service.test_recrawl import START, PoissonFeeds, make_service


def crawl(service, clock, feeds, epochs, failing=()):
    """Like tests.service.test_recrawl.crawl_epochs, with sources ``failing`` answering 404."""
    for _ in range(epochs):
        while (c := service.next_crawl()) is not None:
            if c.source in failing:
                service.crawl_failed(c, "http_404", "HTTP 404")
            else:
                service.feed_fetched(c, feeds.entries(c.source, clock.now()))
        clock.advance_to(service.wake_at)


def crawled(tmp_path, policy="whittle", n=6, epochs=12, failing=(4,), **settings):
    store = SqliteStateStore(tmp_path / FILE_NAME)
    service, clock = make_service(n=n, policy=policy, budget=2, period=600.0, store=store,
                                  **settings)
    feeds = PoissonFeeds([0.01 * (i + 1) for i in range(n)], seed=1)
    crawl(service, clock, feeds, epochs, failing)
    return service, clock, feeds


def test_epochs_errors_and_sources_are_those_of_the_crawl(tmp_path):
    service, clock, _ = crawled(tmp_path, policy="round_robin")
    service.close()
    report = load_report(tmp_path)
    assert report.n == 6 and report.policy == "round_robin" and report.budget == 2
    assert report.at == pytest.approx(clock.now())
    e = report.epochs
    assert e["epoch"].tolist() == list(range(12))
    assert int(e["crawls"].sum()) == service.stats.get("crawls") == 24
    assert report.errors["http_404"].sum() == service.stats.get("errors/http_404")
    assert np.array_equal(report.errors["http_404"], e["errors"])    # the one kind
    assert report.sources["crawls"].tolist() == service.state.crawls.tolist()
    assert report.completed_budget_use() == pytest.approx(1.0)
    assert report.sources["planned"].sum() == 2


def test_a_policy_that_does_not_rank_still_plans(tmp_path):
    service, _, _ = crawled(tmp_path, policy="uniform")
    service.close()
    report = load_report(tmp_path)
    assert not report.ranks and np.isnan(report.sources["index"]).all()
    assert report.sources["planned"].sum() == 2
    assert any("does not rank" in note for note in report.notes)
    table = text(report)
    assert "does not rank" in table
    rates = report.sources["rate_per_hour"]
    assert np.isnan(rates).all()         # uniform learns nothing: sorted by id then
    assert "epoch 12" in table


def test_an_oracle_policy_without_its_parameters_has_no_plan(tmp_path):
    from scrapy_whittle.service.clock import SimulatedClock
    from scrapy_whittle.service.config import WhittleConfig
    from scrapy_whittle.service.recrawl import RecrawlService
    from scrapy_whittle.service.sources.registry import SourceSpec, load_oracle

    oracle = {f"https://s{i}.example/feed.xml": {"rate": 0.01 * (i + 1), "mean_utility": 1.0,
                                                 "decay": 1e-4} for i in range(4)}
    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": 2, "WHITTLE_PERIOD": 600,
                                          "WHITTLE_POLICY": "oracle",
                                          "WHITTLE_ORACLE_PARAMS": oracle})
    service = RecrawlService(config, clock=SimulatedClock(start=START),
                             store=SqliteStateStore(tmp_path / FILE_NAME),
                             oracle=load_oracle(oracle))
    service.open([SourceSpec(url=url) for url in oracle])
    service.close()
    report = load_report(tmp_path)
    assert "WHITTLE_ORACLE_PARAMS" in report.no_plan and not report.sources["planned"].any()
    assert "no index or plan" in text(report)
    # with the project's settings it is rebuilt
    report = load_report(tmp_path, settings={"WHITTLE_ORACLE_PARAMS": oracle})
    assert report.ranks and not report.no_plan and report.sources["planned"].sum() == 2


def test_a_live_crawl_is_read_at_its_last_checkpoint_and_never_written(tmp_path):
    service, clock, feeds = crawled(tmp_path, epochs=3)
    service.checkpoint()
    path = tmp_path / FILE_NAME
    files = sorted(p.name for p in tmp_path.iterdir())
    first = load_report(tmp_path)
    assert int(first.epochs["crawls"].sum()) == 6
    crawl(service, clock, feeds, 3, failing=(4,))
    service.checkpoint()
    second = load_report(path)
    assert int(second.epochs["crawls"].sum()) == 12 and second.at > first.at
    assert sorted(p.name for p in tmp_path.iterdir()) == files
    with pytest.raises(Exception, match="read-only"):
        from scrapy_whittle.report.data import ReadOnlyStore

        ReadOnlyStore(path).write(service.prepare_checkpoint())
    assert first.live and second.live            # running: the last epoch may not be over
    service.close()


def test_the_figures_say_whether_the_last_epoch_is_running_and_write_counts_plainly(
        tmp_path):
    from dataclasses import replace

    from scrapy_whittle.report import figures

    service, _, _ = crawled(tmp_path, epochs=3)
    service.checkpoint()
    running = load_report(tmp_path)
    service.close()
    stopped = load_report(tmp_path)
    assert running.live and not stopped.live     # closed cleanly: no write-ahead log left
    texts = {}
    for name, report in (("running", running), ("stopped", stopped)):
        last = int(report.epochs["epoch"][-1])               # its last epoch is "now"
        report = replace(report, at=report.origin + (last + 0.5) * report.period)
        fig = figures.timeline(report)
        texts[name] = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert texts["running"] == ["current epoch (still running)"]
    assert texts["stopped"] == ["last epoch (the crawl stopped in it)"]
    assert figures._count(10800.0) == "10,800" and figures._count(2.5) == "2.5"


def test_learned_values_are_shown_only_for_sources_fetched(tmp_path):
    service, _, _ = crawled(tmp_path, policy="whittle", failing=(4,))
    service.close()
    report = load_report(tmp_path)
    lines = text(report, sort="url").splitlines()
    row = next(line for line in lines if line.startswith("https://s4.example"))
    assert row.split()[1:4] == ["–", "–", "–"]        # never fetched: only the priors
    assert math.isfinite(report.sources["rate_per_hour"][0])


def test_no_state_or_no_checkpoint_is_a_report_error(tmp_path):
    with pytest.raises(ReportError, match="no crawl state here"):
        load_report(tmp_path)
    assert not list(tmp_path.iterdir())
    SqliteStateStore(tmp_path / FILE_NAME).close()          # a crawl that wrote nothing yet
    with pytest.raises(ReportError, match="no checkpoint"):
        load_report(tmp_path)


def learned_problem(report):
    """(alpha, u) per epoch of the sources the crawl learned, through SourceParams (seconds)
    from the columns a person reads."""
    from scrapy_whittle.core.problem import SourceParams

    s = report.sources
    known = s["crawls"] > s["errors"]
    params = SourceParams(rate=s["rate_per_hour"][known] / 3600,
                          mean_utility=s["mean_value"][known],
                          decay=math.log(2) / (s["half_life_hours"][known] * 3600),
                          period=report.period)
    return params.alpha, params.u


def test_the_budget_curve_is_the_bound_of_what_the_crawl_learned(tmp_path):
    from scrapy_whittle import upper_bound

    service, _, _ = crawled(tmp_path, policy="whittle", failing=(4,))
    service.close()
    report = load_report(tmp_path)
    curve = report.budget_curve
    assert curve and not curve.message
    assert (curve.sources, curve.left_out) == (5, 1)      # the failing source: nothing learned
    assert curve.current == 2 and curve.saturation == pytest.approx(5.0)   # unit costs
    assert curve.budgets[0] == pytest.approx(2 / 8) and curve.budgets[-1] == curve.saturation
    assert np.all(np.diff(curve.budgets) > 0) and np.all(np.diff(curve.shares) >= -1e-12)
    alpha, u = learned_problem(report)
    for budget in (0.25, 1.0, 2.0, 4.0):
        expected = upper_bound(alpha, u, budget).value / u.sum()
        assert curve.share_at(budget) == pytest.approx(expected, rel=1e-6)
    assert curve.share_at(5.0) == 1.0 and 0 < curve.share_at(2.0) < 1
    table = text(report)
    now, double = curve.share_at(2.0), curve.share_at(4.0)
    assert (f"At 2 crawls per 10 min you capture {now:.0%} of what 5 would; 4 would capture "
            f"{double:.0%}.") in table
    rows = [line.split() for line in table.splitlines() if line.endswith("WHITTLE_BUDGET")]
    assert rows == [["#", "2", f"{now:.0%}", "<-", "WHITTLE_BUDGET"]]


def test_a_budget_that_crawls_every_source_every_epoch_captures_everything(tmp_path):
    service, _, _ = crawled(tmp_path, policy="whittle", n=2, failing=())
    service.close()
    report = load_report(tmp_path)
    curve = report.budget_curve
    assert curve.saturation == 2.0 == curve.current and curve.share_at(2.0) == 1.0
    assert ("At 2 crawls per 10 min you capture all the value available (2 would: every "
            "source with value crawled every 10 min); 1 would capture") in text(report)


def test_no_budget_curve_without_learned_parameters(tmp_path):
    service, _, _ = crawled(tmp_path / "uniform", policy="uniform")
    service.close()
    report = load_report(tmp_path / "uniform")
    assert not report.budget_curve and report.budget_curve.left_out == 6
    assert "policy 'uniform' learns no publishing rates" in report.budget_curve.message
    assert "# no budget curve: policy 'uniform' learns no publishing rates" in text(report)
    service, _, _ = crawled(tmp_path / "failing", failing=range(6))
    service.close()
    report = load_report(tmp_path / "failing")
    assert "no source has been fetched successfully yet" in text(report)
    assert report.budget_curve.budgets.size == 0


def test_each_host_that_limits_the_crawl_has_a_line_and_a_row(tmp_path):
    from scrapy_whittle.report.page import render
    from scrapy_whittle.report.table import OTHER_HOSTS, host_rows
    from scrapy_whittle.service.clock import SimulatedClock
    from tests.service.test_host_throttle import BIG, FakeWeb, crawl_epochs, limited
    from tests.service.test_host_throttle import START as T0
    from tests.service.test_host_throttle import make_service as host_service

    clock = SimulatedClock(start=T0)
    limits = {BIG: 4, "o1.example": 1}
    service = host_service(clock, store=SqliteStateStore(tmp_path / FILE_NAME),
                           WHITTLE_HOST_LIMITS=limits)
    crawl_epochs(service, clock, limited(service, clock, FakeWeb(rate=2)), 4)
    service.close()
    report = load_report(tmp_path, settings={"WHITTLE_HOST_LIMITS": limits})
    lines = [line for line in text(report).splitlines() if line.startswith("# host ")]
    assert lines == [f"# host {BIG} throttled: 2 crawls per epoch now, limit 4; it bore 2 "
                     "when it last objected (1 cut so far)",
                     "# host o1.example limited: 1 crawls per epoch (limit 1; 1 feeds)"]
    unset = load_report(tmp_path)
    assert "limit none set" in text(unset)
    # the project's delays are allowances too: a slot's own, and DOWNLOAD_DELAY for the rest
    # (the project's where the store kept none, as one written before it kept the crawl's)
    import sqlite3

    with sqlite3.connect(tmp_path / FILE_NAME) as db:
        db.execute("DELETE FROM meta WHERE key = 'download_delay'")
    db.close()
    report = load_report(tmp_path, settings={
        "WHITTLE_HOST_LIMITS": limits, "DOWNLOAD_DELAY": 250,
        "DOWNLOAD_SLOTS": {"o2.example": {"delay": 120}}})
    rows = {row[0]: row for row in host_rows(report)}
    assert list(rows) == [BIG, "o1.example", "o2.example", OTHER_HOSTS]
    assert rows[BIG][1:5] == (12, 4.0, 250, 2.0)               # throttled to 2: shown as is
    assert rows["o1.example"][4] == 1.0                        # limit 1 < floor(600 / 250)
    assert rows["o2.example"][3:5] == (120.0, 5.0)             # floor(600 / 120)
    assert rows[OTHER_HOSTS][1:5] == (6, math.inf, 250.0, 2.0)    # o0, o3 ... o7
    page = render(report, {})
    assert "<h2>Hosts that limit the crawl</h2>" in page
    # a number's header sits over it, right-aligned like the number
    assert "<th>host</th>" in page and '<th class="n">feeds</th>' in page
    assert '<th class="n">allowance now</th>' in page
    assert f'<td class="url">{BIG}</td><td class="n">12</td><td class="n">4</td>' in page
    plain = load_report(tmp_path)
    plain.hosts = []
    assert host_rows(plain) == [] and "Hosts that limit" not in render(plain, {})


def test_the_hosts_delay_is_the_one_the_crawl_ran_with_not_the_project_file_s(tmp_path):
    """A crawl run with ``-s DOWNLOAD_DELAY=0`` in a project whose settings say 1: the report
    reads the crawl's delay from its store; a store written before it kept one, the
    project's."""
    from scrapy_whittle.service.config import WhittleConfig
    from scrapy_whittle.service.recrawl import RecrawlService
    from scrapy_whittle.service.sources.registry import SourceSpec

    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": 2, "WHITTLE_PERIOD": 600.0,
                                          "WHITTLE_POLICY": "round_robin"})
    for delay in (0.0, 2.5):
        store = SqliteStateStore(tmp_path / str(delay) / FILE_NAME)
        service = RecrawlService(config, clock=SimulatedClock(start=START), store=store,
                                 download_delay=delay)
        service.open([SourceSpec(url=f"https://s{i}.example/f") for i in range(3)])
        service.checkpoint()
        service.close()
        report = load_report(tmp_path / str(delay), settings={"DOWNLOAD_DELAY": 1})
        assert report.download_delay == delay
    from scrapy_whittle.report.data import _crawl_delay

    assert _crawl_delay({}, {"DOWNLOAD_DELAY": 1}) == 1.0
