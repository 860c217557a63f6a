"""sim.bench: the command line (its one entry point, python -m sim.bench [NAME]) and the
policies' JSON report."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from sim.bench import BENCHMARKS, module_of
from sim.bench.__main__ import main as entry
from sim.bench.policies import main, mean_ci95, state_bytes, t975

BENCH = Path(__file__).resolve().parents[2] / "sim" / "bench"


def test_json_report_structure_and_ratios(capsys):
    policies = ["oracle", "greedy", "static", "round_robin", "uniform", "nutch", "miniflux"]
    code = main(["--scenario", "news-mix", "--n", "200", "--budget", "2", "--horizon", "120",
                 "--step", "60", "--seeds", "2", "--policy", ",".join(policies), "--start",
                 "empty", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in report["results"]] == policies
    bound = report["upper_bound"]
    for r in report["results"]:
        for key in ("policy", "reward", "ci95", "upper_bound", "ratio", "decision_ms"):
            assert key in r
        assert r["upper_bound"] == bound and r["ratio"] == pytest.approx(r["reward"] / bound)
        # the bound holds; the first quarter, from empty sources, earns less than the rest
        assert 0 < r["reward_from_empty"] < r["reward"] <= bound * (1 + 1e-9), r
        assert r["decision_ms"] > 0, r                # measured, not left at zero
    oracle, greedy, static, round_robin, uniform, nutch, miniflux = (
        {r["policy"]: r for r in report["results"]}[p] for p in policies)
    # news-mix is deterministic here: policies that draw nothing earn the same on both seeds
    # (ci95 exactly 0); static and uniform draw from the seed, and their two seeds differ
    for r in (oracle, greedy, round_robin, nutch, miniflux):
        assert r["ci95"] == 0.0, r
    for r in (static, uniform):
        assert r["ci95"] > 0.0, r
    # the Whittle index policy on the true parameters is near the bound (0.9980 of it on this
    # seeded run: the tolerance of 0.002 is what a change in its float arithmetic could move
    # it, no more);
    # the oracles earn over twice what the best schedule blind to the sources earns (static
    # 169, miniflux 78)
    assert oracle["ratio"] == pytest.approx(0.998, abs=2e-3)
    schedules = max(r["reward"] for r in (round_robin, uniform, nutch, miniflux))
    assert oracle["reward"] > greedy["reward"] > static["reward"] > 2 * schedules


def test_tcns2018_m1_oracle_reaches_the_bound(capsys):
    # through the entry point: with no benchmark named, the policies' benchmark
    assert entry(["--scenario", "tcns2018", "--policy", "oracle", "--horizon", "200",
                  "--seeds", "1", "--json"]) == 0
    (r,) = json.loads(capsys.readouterr().out)["results"]
    assert r["reward"] == pytest.approx(260.39, abs=0.005)
    assert r["ratio"] == pytest.approx(1.0, abs=1e-9)
    assert r["reward_from_empty"] < r["reward"]


def test_text_output_and_errors(capsys):
    assert main(["--scenario", "icc2021-single", "--policy", "uniform", "--horizon", "50",
                 "--seeds", "2"]) == 0
    out = capsys.readouterr().out
    assert "upper bound" in out and "uniform" in out
    assert main(["--policy", "no-such-policy"]) == 2
    assert "unknown policy" in capsys.readouterr().err


def test_the_entry_point_names_every_benchmark_and_refuses_others(capsys):
    # every module of sim/bench with a command line of its own is a benchmark by name
    commands = {f"sim.bench.{path.stem}" for path in BENCH.glob("*.py")
                if "harness.parser(" in path.read_text()}
    assert commands == {module_of(name) for name in BENCHMARKS}
    for name in BENCHMARKS:
        tree = ast.parse((BENCH / f"{module_of(name).rsplit('.', 1)[1]}.py").read_text())
        assert any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body), name
    assert entry(["no-such-benchmark"]) == 2
    err = capsys.readouterr().err
    assert "no-such-benchmark" in err and all(f"\n  {name} " in err for name in BENCHMARKS)
    with pytest.raises(SystemExit) as done:
        entry(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "--scenario" in out and all(f"\n  {name} " in out for name in BENCHMARKS)
    with pytest.raises(SystemExit):
        entry(["overlap", "--help"])
    assert capsys.readouterr().out.startswith("usage: python -m sim.bench overlap ")


def test_perf_mode_small(capsys):
    assert main(["--perf", "--n", "2000", "--epochs", "3", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["n"] == 2000 and report["epochs"] == 3
    assert report["budget"] == 20 and report["warm_epochs"] == 2 * 2000 // 20   # 1%, 2 rounds
    assert 0 < report["state_bytes_per_source"] <= 400
    assert 0 < report["oracle_decision_ms_median"] <= report["oracle_decision_ms_max"]
    assert report["oracle_decision_ms"] <= report["oracle_decision_ms_max"]
    assert report["sim_source_epochs_per_s"] > 0 and report["sim_stochastic_items_per_s"] > 0


def test_statistics_helpers():
    assert t975(1) == 12.706 and t975(1000) == pytest.approx(1.9623, abs=1e-3)
    m, ci = mean_ci95([1.0, 2.0, 3.0])
    assert m == 2.0 and ci == pytest.approx(4.303 * 1.0 / 3**0.5)
    assert mean_ci95([5.0]) == (5.0, 0.0)


def test_state_bytes_counts_each_buffer_once():
    import numpy as np

    a = np.zeros(100)

    class Holder:
        def __init__(self):
            self.x = a
            self.view = a[:10]
            self.more = {"y": np.ones(50, dtype=np.int32)}

    assert state_bytes(Holder(), Holder()) == 800 + 200 + 200


def test_volume_of_runs_every_policy_at_the_rules_own_budget(capsys):
    from sim.bench.policies import rule_volume
    from sim.web.scenarios import make_scenario

    # hourly epochs and a one-hour interval: every source due every epoch, a volume of N
    assert main(["--scenario", "news-mix", "--n", "60", "--horizon", "40", "--step", "60",
                 "--seeds", "2",
                 "--volume-of", "fixed-interval", "--policy", "fixed-interval,round_robin",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["volume_of"] == {"policy": "fixed-interval", "volume": 60.0}
    assert report["budget"] == 60.0
    fixed, round_robin = report["results"]
    assert fixed["reward"] == pytest.approx(round_robin["reward"])   # both crawl everything
    # news-crawl's schedule, unconstrained: every source at epoch 0 and again at 12 (its
    # 720 min first interval), which the measured epochs 10..39 count; then fewer
    scenario = make_scenario("news-mix", n=60)
    volume = rule_volume(scenario, "stormcrawler", horizon=40, seeds=1, warmup=10)
    assert 60 / 30 < volume < 60 / 3
    assert rule_volume(scenario, "stormcrawler", horizon=13, seeds=1, warmup=12) == 60.0
    assert main(["--volume-of", "no-such-rule"]) == 2
    assert "unknown policy" in capsys.readouterr().err


def test_a_fractional_budget_is_spent_through_a_credit():
    """0.8 a epoch: nothing, then one crawl each of the next four epochs (4 in 5, 8 in 10),
    whatever the policy; a whole budget is the budget every epoch."""
    from dataclasses import replace

    import numpy as np

    from sim.bench.measures import UserMeasures
    from sim.bench.policies import run_policy
    from sim.web.credit import BudgetCredit
    from sim.web.scenarios import make_scenario

    credit = BudgetCredit(0.8)
    spent = []
    for _ in range(10):
        allowed = credit.allowance()
        action = np.arange(int(allowed))
        credit.spend(np.ones(3), action)
        spent.append(action.shape[0])
    assert spent == [0, 1, 1, 1, 1, 0, 1, 1, 1, 1]
    whole = BudgetCredit(6.0)
    assert [whole.allowance() for _ in range(3)] == [6.0, 6.0, 6.0] and whole.whole
    scn = replace(make_scenario("news-mix", n=20, stochastic=True), budget=0.8)
    for name in ("round_robin", "whittle", "nutch"):
        for horizon, crawls in ((5, 4), (10, 8)):
            ledger = UserMeasures()
            run_policy(scn, name, horizon, 0, measures=ledger)
            assert ledger.crawls == crawls, name


def test_values_capture_tells_the_learners_only_what_a_crawl_is_told(capsys):
    """``--values capture``: the learners see each crawl's captured total at the items'
    ages, no base value; the oracle, which needs none, earns the same."""
    args = ["--scenario", "news-mix", "--n", "100", "--budget", "2", "--horizon", "80",
            "--step", "60", "--seeds", "1", "--stochastic", "--policy", "oracle,whittle", "--json"]
    reports = {}
    for values in ("base", "capture"):
        assert main([*args, "--values", values]) == 0
        reports[values] = json.loads(capsys.readouterr().out)
        assert reports[values]["values"] == values
    base, capture = ({r["policy"]: r["reward"] for r in reports[v]["results"]}
                     for v in ("base", "capture"))
    assert capture["oracle"] == base["oracle"]
    assert capture["whittle"] != base["whittle"]
    with pytest.raises(SystemExit):
        main([*args, "--values", "engagement"])


def test_news_scenarios_decide_every_minute_by_default(capsys):
    """``--step`` (minutes, default 1) on a news scenario: the budget stays crawls per hour,
    spent a sixtieth of it per epoch, and the delays come out in minutes; the rhythm's
    periodic bound is not computed at 1,440 epochs a day."""
    assert main(["--scenario", "news-diurnal", "--n", "12", "--budget", "6", "--stochastic",
                 "--window", "20", "--horizon", "120", "--seeds", "1",
                 "--policy", "miniflux,whittle", "--max-interval", "24", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["budget"] == pytest.approx(6 / 60)
    for r in report["results"]:
        assert r["reward"] > 0 and r["ratio"] != r["ratio"], r            # NaN: no bound
        assert 0 < r["measures"]["delay_p90_minutes"] <= 120, r
    for argv, error in (
            (["--scenario", "tcns2018", "--step", "1"], "counts time in its own epochs"),
            (["--scenario", "news-diurnal", "--n", "5", "--policy", "diurnal-oracle"],
             "--step 60"),
            (["--scenario", "news-hosts", "--n", "40", "--rate-limit", "2"], "--step 60")):
        assert main(argv) == 2
        assert error in capsys.readouterr().err, argv


@pytest.mark.parametrize("name", ["miniflux", "whittle"])
def test_the_budget_per_hour_is_the_same_at_any_step(name):
    """Three hours at six crawls an hour: 18 crawls in 180 one-minute epochs as in 3 hourly
    ones, for a rule (its intervals in hours) and for the index policy."""
    from sim.bench.measures import UserMeasures
    from sim.bench.policies import run_policy
    from sim.web.scenarios import at_step, make_scenario

    hourly = make_scenario("news-mix", n=20, budget=6, stochastic=True, step=60)
    assert at_step(hourly, 60) is hourly
    crawls = {}
    for step, horizon in ((60, 3), (1, 180)):
        scenario = make_scenario("news-mix", n=20, budget=6, stochastic=True, step=step)
        assert scenario.policy_problem.period == pytest.approx(1.0)    # the policies' hour
        ledger = UserMeasures()
        run_policy(scenario, name, horizon, 0, measures=ledger)
        crawls[step] = ledger.crawls
    assert crawls == {60: 18, 1: 18}


def test_a_rhythm_on_minute_epochs_is_the_same_rhythm():
    """news-diurnal at --step 1 keeps each source's p_i(t), on bins of a minute."""
    import numpy as np

    from sim.web.scenarios import make_scenario

    minutes, hours = (make_scenario("news-diurnal", n=8, weekend=True, step=step)
                      for step in (1, None))
    assert (minutes.profile.bins, hours.profile.bins) == (1440, 96)
    assert minutes.periodic.k == 7 * 1440
    t, ids = np.linspace(0.01, 335.99, 997), np.arange(8)[:, None]
    for fn in ("multiplier", "cumulative"):
        np.testing.assert_allclose(getattr(minutes.profile, fn)(t, ids),
                                   getattr(hours.profile, fn)(t, ids), rtol=1e-12)
    # the simulator's expected value, summed at once over the 10,080 phases of a week
    from sim.web.diurnal import summed_accumulated

    ids, phase = np.array([0, 3, 5, 5]), np.array([0, 700, 7 * 1440 - 1, 9])
    k = np.array([0, 61, 7 * 1440 * 3 + 5, 2**40 * 7 * 1440])
    np.testing.assert_allclose(summed_accumulated(minutes.periodic, ids, phase, k),
                               minutes.periodic.accumulated(ids, phase, k), rtol=1e-10)
