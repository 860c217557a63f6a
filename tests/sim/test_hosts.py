from __future__ import annotations

import numpy as np

from sim.bench.policies import evaluate
from sim.web.scenarios import make_scenario


def test_news_hosts_puts_sources_on_hosts_with_allowances():
    s = make_scenario("news-hosts", n=200, seed=1)
    assert s.hosts.shape == (200,)
    sizes = np.bincount(s.hosts, minlength=s.host_limits.shape[0])
    assert sizes.sum() == 200 and np.all(sizes > 0)
    assert np.isfinite(s.host_limits).sum() > 0 and np.isinf(s.host_limits[0])


def test_allowances_in_the_plan_keep_every_limit_and_beat_costs_and_slots():
    # (the bound is a long-run average: a short run's mean may pass it)
    s = make_scenario("news-hosts", n=200, seed=1)
    report = evaluate(s, ["oracle"], horizon=400, seeds=1, hosts=("allowance", "costs"))
    by = {r["policy"]: r for r in report["results"]}
    assert by["oracle"]["hosts"]["over_limit"] == 0
    assert by["oracle+costs"]["hosts"]["over_limit"] == 0
    assert by["oracle"]["reward"] > by["oracle+costs"]["reward"]
    assert by["oracle"]["reward"] <= report["upper_bound"] * (1 + 1e-9)


def test_a_rate_limiting_host_is_throttled_after_its_first_429():
    s = make_scenario("news-hosts", n=200, seed=1, rate_limit=1.0)
    report = evaluate(s, ["oracle"], horizon=120, seeds=1)
    host0 = report["results"][0]["hosts"]["host0"]
    assert host0["rejected"] >= 1
    assert host0["rejected_after_first"] <= 0.05 * host0["requests_after_first"]
    assert host0["accepted_per_epoch"] <= 1.0
