"""Crashes lose nothing: a crawl killed with SIGKILL at random moments restarts from its last
checkpoint (same learned state, validators, back-offs), never emits again an entry emitted
before that checkpoint, and a damaged state file never stops it."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from scrapy_whittle.service.store import FILE_NAME
from tests.scrapy.conftest import ROOT, Server

N_FEEDS = 40


@pytest.fixture(scope="module")
def fast_web():
    server = Server("--scenario", "news-mix", "--n", str(N_FEEDS), "--speed", "36000",
                    "--seed", "5")
    yield server
    server.stop()


def start(server, tmp: Path, run: int, seconds: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.scrapy.crash_crawl", server.url, str(N_FEEDS),
         str(tmp / "job"), str(tmp / "items.jsonl"), str(tmp / f"dump{run}.json"),
         str(seconds)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)


def snapshot(store: Path) -> dict:
    """What the last committed checkpoint holds."""
    with sqlite3.connect(store) as db:
        meta = dict(db.execute("select key, value from meta"))
        rows = db.execute("select id, policy_row, entries, etag, retry_at, failures "
                          "from sources order by id").fetchall()
    return {"checkpoint_at": float(meta["checkpoint_at"]), "origin": float(meta["origin"]),
            "policy_rows": [r[1].hex() for r in rows],
            "entries": [(r[2] or b"").hex() for r in rows], "etag": [r[3] for r in rows],
            "retry_at": [r[4] for r in rows], "failures": [r[5] for r in rows]}


def items(tmp: Path) -> list[dict]:
    path = tmp / "items.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_killed_crawls_restart_from_their_last_checkpoint(fast_web, tmp_path):
    rng = np.random.default_rng(11)
    kills = []                    # (snapshot at the kill, number of items emitted by then)
    for run in range(5):
        proc = start(fast_web, tmp_path, run, seconds=3.0)
        if run == 4:              # the last run ends by itself
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err[-3000:]
        else:
            deadline = time.monotonic() + 60
            while not (tmp_path / f"dump{run}.json").exists():     # restored and crawling
                assert proc.poll() is None, proc.communicate()[1][-3000:]
                assert time.monotonic() < deadline
                time.sleep(0.05)
            time.sleep(rng.uniform(0.3, 1.8))
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=30)
            assert proc.returncode == -signal.SIGKILL
            kills.append((snapshot(tmp_path / "job" / FILE_NAME), len(items(tmp_path))))
        if run > 0:               # this run started from the previous kill's checkpoint
            dump = json.loads((tmp_path / f"dump{run}.json").read_text())
            before = kills[run - 1][0]
            for key in ("policy_rows", "entries", "etag", "retry_at", "failures"):
                assert dump[key] == before[key], key
            assert dump["origin"] == before["origin"]
    emitted = items(tmp_path)
    assert len(emitted) > 100
    # an entry emitted before the checkpoint a run was killed after is never emitted again
    start_line, checked = 0, 0
    for snap, end_line in kills:
        safe = {(i["source"], i["entry_id"]) for i in emitted[start_line:end_line]
                if i["discovered_at"] < snap["checkpoint_at"]}
        later = {(i["source"], i["entry_id"]) for i in emitted[end_line:]}
        assert not safe & later
        checked += len(safe)
        start_line = end_line
    assert checked > 50                # kills came after checkpoints that held entries


def test_a_damaged_state_file_does_not_stop_the_crawl(fast_web, tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    (job / FILE_NAME).write_bytes(b"SQLite format 3\x00" + b"\xff" * 5000)   # truncated
    proc = start(fast_web, tmp_path, 0, seconds=1.0)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    assert err.count("moved aside") == 1 and "Traceback" not in err
    assert len(items(tmp_path)) > 0
    assert snapshot(job / FILE_NAME)["origin"] > 0               # a fresh state, written
