"""A small run of python -m sim.bench scheduler: the scheduler inside Scrapy against Scrapy's
default scheduler, and a crawl's state kept in a JOBDIR (start-up, checkpoints, restore).
The figures of docs/benchmarks.md are the same command at 10^4-10^6 sources."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_a_small_bench_scheduler_run_reports_every_policy_and_the_state():
    n = 3000
    cmd = [sys.executable, "-m", "sim.bench", "scheduler", "--n", str(n), "--hosts", "50",
           "--policy", "whittle,round_robin,diurnal-oracle", "--epochs", "2",
           "--warmup", "2", "--state", "--fill", "--json"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["n"] == n and report["budget"] == n // 100 and report["warmup"] == 2
    assert report["scrapy_us_per_request"] > 0
    for name in ("whittle", "round_robin", "diurnal-oracle"):
        row = report["policies"][name]
        assert row["us_per_crawl"] > 0
        assert row["ratio"] == row["us_per_crawl"] / report["scrapy_us_per_request"]
        # the policy's share: part of the crawl's cost, the same figure per epoch
        assert 0 < row["deciding_us_per_crawl"] < row["us_per_crawl"]
        assert row["deciding_ms_per_epoch"] == pytest.approx(
            1e-3 * row["deciding_us_per_crawl"] * report["budget"])
    state = report["state"]
    # N / budget more epochs (--fill) crawl many of the sources; a restore finds them all
    assert n // 100 < state["sources_crawled"] <= n and state["restored_sources"] == n
    assert state["checkpoint_rows"] > 0 and state["store_mb"] > 0
    for key in ("startup_s", "full_checkpoint_s", "checkpoint_s", "restore_s"):
        assert state[key] > 0


def test_decision_steps_pace_the_crawls_one_plan_an_epoch_sends_them_at_once():
    """The pacing measure: the busiest minute's crawls over the budget's mean rate a minute.
    One plan an epoch (WHITTLE_STEP = WHITTLE_PERIOD) hands its whole budget out in the
    epoch's first minute (60); the default's decision steps (here one per crawl, two
    minutes) keep every minute within twice the mean."""
    def peak(*step):
        cmd = [sys.executable, "-m", "sim.bench", "scheduler", "--n", "3000", "--hosts", "50",
               "--policy", "whittle", "--epochs", "2", "--warmup", "2", "--json", *step]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout)["policies"]["whittle"]["minute_peak"]

    assert peak("--step", "3600") == pytest.approx(60.0)
    assert 0.9 <= peak() <= 2.0
