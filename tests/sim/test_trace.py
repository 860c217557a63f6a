"""Traces: reading the CSV format (scrapy_whittle.report.trace) and replaying it (sim.web.trace)
with the stochastic simulator's semantics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from scrapy_whittle.report.trace import Trace, read_trace
from sim.bench.measures import UserMeasures
from sim.web.trace import TraceReplay

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


# a: six items, b: two (hours); epoch t crawls at time start + t
MEASURED = Trace(names=["a", "b"], source=np.array([0, 0, 0, 0, 0, 0, 1, 1]),
                 time=np.array([0.0, 0.5, 1.5, 2.2, 2.4, 2.6, 0.25, 3.5]),
                 utility=np.ones(8))


def _measure(crawls, **options):
    """The users' measures of crawling MEASURED's sources ``crawls[t]`` at epoch t."""
    env = TraceReplay(MEASURED, budget=2, **options)
    env.reset()
    ledger = UserMeasures()
    ledger.begin(env)
    missed = []
    for action in crawls:
        obs, _, _, _, info = env.step(np.array(action, dtype=np.int64))
        ledger.add(obs, info)
        missed.append(info["missed_items"])
    ledger.settle(env)
    return ledger, missed, env.outstanding()


def test_a_replay_reports_the_users_measures_exactly():
    """Window 2: epoch 1 captures a's items of 0.0 and 0.5 h and b's of 0.25 h; epoch 3 finds
    four new items at a and captures the newest two (2.4, 2.6), the two older ones (1.5, 2.2)
    missed; at the end (epoch 4) b's item of 3.5 h waits. Delays 1, 0.5, 0.75, 0.6, 0.4 h."""
    ledger, missed, out = _measure([[], [0, 1], [], [0]], window=2)
    assert missed == [0, 0, 0, 2]
    assert out == {"published": 1, "missed": 0}
    m = ledger.summary(minutes_per_unit=60.0)
    assert m["items_captured"] == 5 and m["items_missed"] == 2
    assert m["items_published"] == 8 and m["missed_share"] == pytest.approx(2 / 8)
    assert m["delay_mean"] == pytest.approx((1 + 0.5 + 0.75 + 0.6 + 0.4) / 5)
    assert m["delay_median"] == pytest.approx(0.6)
    assert m["delay_median_minutes"] == pytest.approx(36.0)
    assert m["crawls_per_item"] == pytest.approx(3 / 5)


def test_a_replay_counts_the_items_past_their_lifetime_and_since_its_start():
    """Lifetime 0.7 h: epoch 1 finds a's item of 0.0 h and b's of 0.25 h gone, epoch 3 a's of
    1.5 and 2.2 h; settled at epoch 5 (time 5), b's item of 3.5 h is gone too. Started at
    1 h (window 2), the items published before count for nothing but the reward: epoch 0
    captures them, epoch 2 (time 3) a's newest two and misses 1.5 and 2.2 h, and settling at
    epoch 3 (time 4) leaves b's item waiting."""
    ledger, missed, out = _measure([[], [0, 1], [], [0], []], lifetime=0.7)
    assert missed == [0, 2, 0, 2, 0]
    assert out == {"published": 1, "missed": 1}
    m = ledger.summary()
    assert (m["items_captured"], m["items_missed"], m["items_published"]) == (3, 5, 8)
    assert m["delay_mean"] == pytest.approx((0.5 + 0.6 + 0.4) / 3)
    ledger, missed, out = _measure([[0, 1], [], [0]], window=2, start=1.0)
    assert missed == [0, 0, 2] and out == {"published": 1, "missed": 0}
    m = ledger.summary()
    assert (m["items_captured"], m["items_missed"], m["items_published"]) == (2, 2, 5)
    assert m["delay_mean"] == pytest.approx((0.4 + 0.6) / 2)
