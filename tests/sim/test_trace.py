"""sim.trace: reading CSV traces and replaying them with the stochastic simulator's semantics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.trace import TraceReplay, read_trace

EXAMPLE = Path(__file__).resolve().parents[2] / "sim" / "data" / "bursty_feeds.csv"

SMALL = """source,timestamp,utility
a,0.5,1.0
b,0.2,2.0
a,1.5,3.0
a,2.5,4.0
b,3.9,1.0
"""


def test_read_trace_sorts_and_names():
    tr = read_trace(SMALL.splitlines())
    assert tr.names == ["a", "b"]
    assert tr.source.tolist() == [0, 0, 0, 1, 1]
    assert tr.time.tolist() == [0.5, 1.5, 2.5, 0.2, 3.9]


def test_header_optional_comments_and_missing_utility():
    tr = read_trace(["# a comment", "", "x,1.0", "x,2.0,0.5"])
    assert tr.names == ["x"] and np.isnan(tr.utility[0]) and tr.utility[1] == 0.5


def test_iso_timestamps():
    tr = read_trace(["s,2024-01-01T00:00:00Z", "s,2024-01-01T02:30:00+00:00"])
    assert tr.time[1] - tr.time[0] == pytest.approx(2.5)


@pytest.mark.parametrize("line, why", [
    ("a", "expected 2 or 3 fields"),
    ("a,1,2,3", "expected 2 or 3 fields"),
    (",1.0", "empty source"),
    ("a,yesterday", "timestamp"),
    ("a,1.0,lots", "utility is not a number"),
    ("a,1.0,-2", "utility must be"),
    ("a,inf", "finite"),
])
def test_malformed_rows_name_line_and_content(line, why):
    with pytest.raises(ValueError, match=why) as err:
        read_trace(["source,timestamp,utility", "ok,1.0,1.0", line])
    assert "line 3" in str(err.value) and repr(line) in str(err.value)


def test_malformed_file_on_disk(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("a,1.0\nb,notatime\n")
    with pytest.raises(ValueError, match="line 2"):
        read_trace(path)


def test_replay_captures_items_since_the_last_crawl():
    env = TraceReplay(SMALL.splitlines(), budget=2, decay=0.0, start=0.0)
    obs, info = env.reset(seed=1)
    assert obs.sources.size == 0 and info == {}
    assert not env.problem.knows_parameters
    env.step([])                                               # epoch 0, time 0
    obs, reward, _, _, _ = env.step([0])                       # time 1: a@0.5
    assert obs.new_items.tolist() == [1] and reward == 1.0
    env.step([])                                               # time 2
    obs, reward, _, _, _ = env.step([0, 1])                    # time 3: a@1.5, a@2.5 | b@0.2
    assert obs.new_items.tolist() == [2, 1] and reward == 3.0 + 4.0 + 2.0
    np.testing.assert_allclose(obs.items_of(0)[0], [2.5, 1.5])  # newest first
    obs, reward, _, truncated, _ = env.step([1])               # time 4: b@3.9, the last item
    assert reward == 1.0 and truncated
    obs, reward, _, truncated, _ = env.step([0, 1])
    assert reward == 0.0 and truncated


def test_decay_window_lifetime():
    env = TraceReplay(SMALL.splitlines(), budget=1, decay={"a": 0.5, "b": 0.0}, start=0.0,
                      window=1)
    env.reset()
    for _ in range(3):
        env.step([])
    obs, reward, *_ = env.step([0])                            # time 3: newest a@2.5 only
    assert obs.new_items.tolist() == [1] and bool(obs.window_full[0])
    assert reward == pytest.approx(4.0 * np.exp(-0.5 * 0.5))
    env = TraceReplay(SMALL.splitlines(), budget=1, decay=0.0, start=0.0, lifetime=1.0)
    env.reset()
    for _ in range(3):
        env.step([])
    obs, reward, *_ = env.step([0])                            # only a@2.5 is younger than 1
    assert obs.new_items.tolist() == [1] and reward == 4.0
    with pytest.raises(ValueError, match="decay has no value"):
        TraceReplay(SMALL.splitlines(), budget=1, decay={"a": 0.5})


def test_example_trace_is_bursty_and_replays_completely():
    env = TraceReplay(EXAMPLE, budget=6, decay=0.1)
    assert len(env.names) == 6
    env.reset(seed=0)
    captured = 0
    for _ in range(24 * 14 + 2):
        obs, _, _, truncated, _ = env.step(np.arange(6))
        captured += int(obs.new_items.sum())
    assert truncated and captured == env.trace.time.size
    # not Poisson: hourly counts of the busiest feed are over-dispersed
    busiest = env.source_id("agency-wire")
    times = env.trace.time[env.trace.source == busiest]
    counts = np.bincount(times.astype(int), minlength=24 * 14)
    assert counts.var() > 2 * counts.mean()
    fitted = env.fitted_params()
    assert fitted.rate[busiest] == pytest.approx(times.size / (env.trace.time.max()
                                                               - env.trace.time.min()))


def test_whittle_on_fitted_params_runs_on_the_trace():
    from scrapy_whittle.core.policies import make_policy
    from scrapy_whittle.core.problem import Problem

    env = TraceReplay(EXAMPLE, budget=1, decay=0.2, window=20)
    env.reset()
    policy = make_policy("oracle", Problem.from_params(env.fitted_params()))
    total = 0.0
    for t in range(100):
        obs, reward, *_ = env.step(policy.select(t, 1))
        policy.observe(obs)
        total += reward
    assert total > 0
