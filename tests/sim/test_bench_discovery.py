"""sim.bench --discovery: a first fetch of every source at epoch 0, outside the budget."""

from __future__ import annotations

import numpy as np
import pytest

from sim.bench.policies import evaluate, run_policy, sweep_step
from sim.web.scenarios import make_scenario


def test_sweep_step_fetches_every_source_and_splits_the_capture():
    scn = make_scenario("news-mix", n=40, budget=2, stochastic=True)
    env = scn.make_env()
    env.reset(seed=3)
    obs, own, swept, _ = sweep_step(env, np.array([7, 3]))
    assert sorted(obs.sources.tolist()) == list(range(40))
    assert own == pytest.approx(obs.reward[:2].sum())
    assert own + swept == pytest.approx(obs.reward.sum())
    assert env.budget == 2.0                       # the budget is back for the next epochs
    with pytest.raises(ValueError, match="budget"):
        env.step(np.arange(3))


def test_learners_sweep_oracles_do_not_and_the_sweep_stays_out_of_the_rewards():
    scn = make_scenario("news-mix", n=40, budget=2, stochastic=True)
    report = evaluate(scn, ["oracle", "whittle"], horizon=6, seeds=1, warmup=0,
                      discovery=True)
    by = {r["policy"]: r for r in report["results"]}
    assert "discovery" not in by["oracle"]
    assert by["whittle"]["discovery"]["crawls"] == 38
    rewards, _ = run_policy(scn, "whittle", 6, 0, discovery=True)
    swept = run_policy.last_sweep[0]
    assert swept == pytest.approx(by["whittle"]["discovery"]["capture"])
    # the 38 swept warm feeds hold more than the 2 budgeted crawls of epoch 0
    assert swept > 5 * rewards[0] > 0
