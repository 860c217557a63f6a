"""The push web (sim.web.push_web) and its hub (sim.web.hub), and sim.bench.push on a small mix."""

from __future__ import annotations

import numpy as np
import pytest

from scrapy_whittle.core.problem import SourceParams
from sim.bench.push import evaluate, main
from sim.web.hub import HubModel
from sim.web.push_web import PushWeb


def alike(n: int, rate: float = 2.0, half_life: float = 6.0) -> SourceParams:
    return SourceParams(rate=np.full(n, rate), mean_utility=np.ones(n),
                        decay=np.full(n, np.log(2) / half_life), period=1.0)


def run(env: PushWeb, epochs: int, polls_per_epoch: int, seed: int = 0):
    """Round-robin polls; returns (poll observations, push observations)."""
    env.reset(seed=seed)
    polls, pushes = [], []
    for t in range(epochs):
        action = (t * polls_per_epoch + np.arange(polls_per_epoch)) % env.n
        obs, reward, _, _, info = env.step(action)
        assert reward == pytest.approx(info["poll_reward"] + info["push_reward"])
        polls.append(obs)
        pushes.append(info["pushes"])
    return polls, pushes


def test_the_hub_delivers_the_share_it_does_not_lose_within_its_delays():
    hub = HubModel(share=1.0, loss=0.2, delay_mean=0.01, delay_max=0.05)
    env = PushWeb(alike(20), 2.0, hub)
    polls, pushes = run(env, 300, 2)
    pushed = sum(int(p.new_items.sum()) for p in pushes)
    polled = sum(int(o.new_items.sum()) for o in polls)
    assert pushed / (pushed + polled) == pytest.approx(0.8, abs=0.02)
    late = np.concatenate([p.time[p.new_items > 0] - p.item_published for p in pushes])
    assert late.min() >= 0 and late.max() <= 0.05
    assert late.mean() == pytest.approx(0.01, rel=0.15)
    # each delivery lands within its epoch's span, in time order
    for t, p in enumerate(pushes):
        assert np.all(np.diff(p.time) >= 0)
        assert np.all((p.time >= t) & (p.time < t + 1))


def test_a_poll_finds_what_is_in_flight_and_its_push_comes_empty():
    hub = HubModel(share=1.0, loss=0.0, delay="uniform", delay_max=2.5)
    env = PushWeb(alike(4, rate=5.0), 4.0, hub)
    polls, pushes = run(env, 60, 4)
    polled = sum(int(o.new_items.sum()) for o in polls)
    empty = sum(int((p.new_items == 0).sum()) for p in pushes)
    # nothing lost: every polled entry was one the poll found before its push, whose push
    # came empty (or is still due after the last epoch)
    due = int(env._ghost[0].shape[0])
    assert polled > 0 and empty + due == polled


def test_a_hub_down_delivers_nothing_published_after_the_fall():
    hub = HubModel(share=1.0, loss=0.1, duplicate=0.2, spurious=1.0, down_at=50.0)
    env = PushWeb(alike(10), 1.0, hub)
    polls, pushes = run(env, 100, 1)
    after = [p for t, p in enumerate(pushes) if t >= 51]
    assert sum(p.sources.shape[0] for p in after) == 0
    before = sum(int((p.new_items == 0).sum()) for p in pushes[:50])
    assert before > 0                            # duplicates and spurious pushes exist
    # after the fall, polls find every entry again
    found = sum(int(o.new_items.sum()) for o in polls[60:])
    assert found == pytest.approx(2.0 * 10 * 40, rel=0.1)


def test_seeded_and_without_hub_nothing_is_pushed():
    hub = HubModel(share=0.5)
    a, _ = run(PushWeb(alike(10), 2.0, hub), 20, 2, seed=3)
    b, _ = run(PushWeb(alike(10), 2.0, hub), 20, 2, seed=3)
    assert all(np.array_equal(x.item_published, y.item_published)
               for x, y in zip(a, b, strict=True))
    _, pushes = run(PushWeb(alike(10), 2.0, None), 20, 2)
    assert all(p.sources.size == 0 for p in pushes)


def test_hub_settings_are_checked():
    with pytest.raises(ValueError, match="loss"):
        HubModel(loss=1.5)
    with pytest.raises(ValueError, match="delay"):
        HubModel(delay="gamma")
    assert HubModel(share=0.3).pushers(100, 0).sum() == 30


def test_bench_push_a_pusher_is_polled_less_and_a_fallen_hub_brings_polls_back():
    report = evaluate(n=400, budget=8, horizon=240, seeds=1,
                      runs=("no-push", "push", "hub-down"))
    runs = report["runs"]
    assert runs["push"]["pusher_polls_vs_no_push"] < 0.6
    assert runs["push"]["utility_vs_no_push"] > 1.0
    assert runs["push"]["delay_median_s"] < runs["no-push"]["delay_median_s"] / 10
    fall = runs["hub-down"]["after_down"]
    assert fall["pusher_polls_second_half_vs_no_push"] > 0.7


def test_bench_push_command_line(capsys):
    assert main(["--n", "100", "--budget", "5", "--horizon", "30", "--seeds", "1",
                 "--runs", "no-push,push"]) == 0
    out = capsys.readouterr().out
    assert "no-push" in out and "push" in out
    assert main(["--runs", "nothing"]) == 2
