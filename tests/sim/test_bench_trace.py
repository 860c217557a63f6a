"""``python -m sim.bench --trace FILE``: a recorded trace replayed like a scenario."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from scrapy_whittle.core.bound import upper_bound
from scrapy_whittle.report.trace import Trace, write_trace
from sim.bench import policies as bench

# hours; epochs crawl at 0, 1, 2: b's item waits 1 h, a's 0.5 h and 0.75 h
TRACE = Trace(names=["a", "b"], source=np.array([0, 0, 1]), time=np.array([0.5, 1.25, 0.0]),
              utility=np.array([1.0, 2.0, 4.0]))


def run(capsys, *args: str) -> dict:
    assert bench.main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_trace_is_replayed_with_the_values_it_recorded(tmp_path, capsys):
    path = tmp_path / "crawl.csv.gz"
    write_trace(TRACE, path)
    out = run(capsys, "--trace", str(path), "--budget", "100%", "--half-life", "1",
              "--policy", "round_robin", "--seeds", "1", "--warmup", "0", "--step", "60")
    assert out["n"] == 2 and out["budget"] == 2.0
    assert out["horizon"] == 3                   # capped: the trace spans 1.25 h
    captured = 1.0 * 0.5 ** 0.5 + 2.0 * 0.5 ** 0.75 + 4.0 * 0.5 ** 1.0
    assert out["results"][0]["reward_from_empty"] == pytest.approx(captured / 3)
    # the bound of the parameters fitted to the trace: rate = items / span, mean value
    fitted = bench.trace_scenario(str(path), budget=2.0, half_life=1.0, step=60.0).problem
    assert fitted.alpha == pytest.approx([0.5, 0.5])
    assert out["upper_bound"] == pytest.approx(
        upper_bound(fitted.alpha, fitted.u, 2.0, fitted.cost).value)


def test_the_feed_window_loses_what_it_does_not_show(tmp_path, capsys):
    path = tmp_path / "crawl.csv"
    write_trace(Trace(names=["a"], source=np.zeros(3, dtype=np.int64),
                      time=np.array([0.1, 0.2, 0.3]), utility=np.ones(3)), path)
    args = ("--trace", str(path), "--budget", "1", "--half-life", "1e9", "--policy",
            "round_robin", "--seeds", "1", "--warmup", "0", "--step", "60")
    everything = run(capsys, *args)["results"][0]
    windowed = run(capsys, *args, "--window", "1")["results"][0]
    assert everything["reward_from_empty"] * 2 == pytest.approx(3.0)
    assert windowed["reward_from_empty"] * 2 == pytest.approx(1.0)
    # the users' measures: epoch 1 (1 h after the first item) captures the three items 1.0,
    # 0.9 and 0.8 h late, or, through a window of one, the newest, the two others missed
    assert everything["measures"]["delay_median_minutes"] == pytest.approx(54.0)
    assert everything["measures"]["items_missed"] == 0
    assert windowed["measures"]["delay_median_minutes"] == pytest.approx(48.0)
    assert windowed["measures"]["items_missed"] == 2
    assert windowed["measures"]["crawls_per_item"] == pytest.approx(2.0)


def test_a_trace_is_replayed_minute_by_minute_by_default(tmp_path, capsys):
    path = tmp_path / "crawl.csv"
    write_trace(TRACE, path)
    args = ("--trace", str(path), "--half-life", "1", "--policy", "round_robin", "--seeds", "1",
            "--warmup", "0")
    # six crawls an hour: one every ten one-minute epochs, spent through the credit
    assert run(capsys, *args, "--budget", "6")["budget"] == pytest.approx(0.1)
    # sixty an hour: one a minute, a and b in turn, so each item is found within two
    out = run(capsys, *args, "--budget", "60")
    assert out["budget"] == pytest.approx(1.0)
    assert out["horizon"] == 77                  # 1.25 h of minutes, and the two ends
    measures = out["results"][0]["measures"]
    assert measures["items_captured"] == 3
    assert measures["delay_p90_minutes"] <= 2.0    # (hourly epochs: 45 min and more)
    assert measures["crawls_per_item"] * 3 == pytest.approx(77)


def test_a_budget_may_be_a_share_of_the_sources(capsys):
    assert bench.budget_of("2%", 50) == 1.0 and bench.budget_of("10%", 50) == 5.0
    assert bench.budget_of("0.1%", 10) == 1.0 and bench.budget_of(3.0, 10) == 3.0
    out = run(capsys, "--scenario", "news-mix", "--n", "200", "--budget", "2%", "--horizon",
              "4", "--seeds", "1", "--policy", "round_robin", "--step", "60")
    assert out["budget"] == 4.0
    for bad in ("lots", "-2%", "0"):
        with pytest.raises(argparse.ArgumentTypeError):
            bench.budget_arg(bad)


def test_a_bad_trace_is_one_error_line(tmp_path, capsys):
    path = tmp_path / "bad.csv"
    path.write_text("a,yesterday\n")
    assert bench.main(["--trace", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("sim.bench: error: trace line 1") and "\n" not in err
    assert bench.main(["--trace", str(tmp_path / "none.csv")]) == 2
    assert bench.main(["--trace", str(tmp_path / "bad.csv"), "--half-life", "0"]) == 2


def test_the_policies_decide_every_step_on_hourly_epochs(tmp_path):
    path = tmp_path / "crawl.csv"
    write_trace(TRACE, path)
    scenario = bench.trace_scenario(str(path), budget=6.0, half_life=1.0, window=20, step=5.0)
    assert scenario.resolution == pytest.approx(5 / 60)
    assert scenario.policy_problem.period == pytest.approx(1.0)     # the policies' hour
    learned = bench.build_policy("whittle", scenario, 0, max_interval=24.0)
    assert learned.resolution == pytest.approx(5 / 60) and learned.max_interval == 24.0
    oracle = bench.build_policy("oracle", scenario, 0)
    assert oracle.window.tolist() == [20.0, 20.0]                  # the window-aware oracle
    assert oracle.rate == pytest.approx(scenario.params.rate)
    rule = bench.build_policy("miniflux", scenario, 0, max_interval=24.0)
    assert not hasattr(rule, "max_interval")                       # the rules keep theirs
