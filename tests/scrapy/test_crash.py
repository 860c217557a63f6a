"""Crashes lose nothing: a crawl killed with SIGKILL at random moments (seeded) restarts from
its last checkpoint (same learned state, validators, back-offs), delivers every entry it
found at least once (to its pipelines and to its feed export), emits again an entry emitted
before that checkpoint only as a replay of what was not through the pipelines yet; a
damaged state file never stops it, and a crawl killed while it searches sites finds at its
restart every site searched or searches it again, and delivers its feeds' entries."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from urllib.request import urlopen

import numpy as np
import pytest

from scrapy_whittle.service.memory.entry_memory import entry_hashes
from scrapy_whittle.service.sources.site_table import SiteTable
from scrapy_whittle.service.state.deliveries import DIRECTORY, Batch
from scrapy_whittle.service.state.store import FILE_NAME
from tests.processes import spawn
from tests.scrapy.conftest import ROOT, Server
from tests.waiting import wait_for

N_FEEDS = 40


@pytest.fixture(scope="module")
def fast_web():
    server = Server("--scenario", "news-mix", "--n", str(N_FEEDS), "--speed", "36000",
                    "--seed", "5")
    yield server
    server.stop()


def start(server, tmp: Path, run: int, seconds: float, *options: str) -> subprocess.Popen:
    """Run ``run`` of the crawl, its log in ``run<run>.log`` (a file: a pipe nobody reads
    while the test polls would fill and stall the crawl); ``options``: crash_crawl's."""
    return spawn([sys.executable, "-m", "tests.scrapy.crash_crawl", server.url, str(N_FEEDS),
                  str(tmp / "job"), str(tmp / "items.jsonl"), str(tmp / f"dump{run}.json"),
                  str(seconds), *options], log=tmp / f"run{run}.log", cwd=ROOT)


def log(tmp: Path, run: int) -> str:
    return (tmp / f"run{run}.log").read_text()


def snapshot(store: Path) -> dict:
    """What the last committed checkpoint holds."""
    with closing(sqlite3.connect(store)) as db:
        meta = dict(db.execute("select key, value from meta"))
        rows = db.execute("select id, policy_row, entries, etag, retry_at, failures "
                          "from sources order by id").fetchall()
    return {"checkpoint_at": float(meta["checkpoint_at"]), "origin": float(meta["origin"]),
            "policy_rows": [r[1].hex() for r in rows],
            "entries": [(r[2] or b"").hex() for r in rows], "etag": [r[3] for r in rows],
            "retry_at": [r[4] for r in rows], "failures": [r[5] for r in rows]}


def hashes(hex_blob: str) -> set[bytes]:
    raw = bytes.fromhex(hex_blob)
    return {raw[i:i + 8] for i in range(0, len(raw), 8)}


def journal(tmp: Path) -> dict[int, set[bytes]]:
    """The hashes of the entries in the delivery journal, per source id (as the entry
    memory keeps them)."""
    out: dict[int, set[bytes]] = {}
    for path in (tmp / "job" / DIRECTORY).glob("*.jsonl"):
        for line in path.read_bytes().split(b"\n"):
            try:
                batch = Batch.from_line(line)
            except ValueError:
                continue                # an empty or cut line
            hashed = entry_hashes([e.key for e in batch.entries]).tobytes()
            out.setdefault(batch.source, set()).update(hashes(hashed.hex()))
    return out


def journal_batches(tmp: Path) -> list[Batch]:
    """The batches in the delivery journal (undelivered when the crawl stopped)."""
    out = []
    for path in (tmp / "job" / DIRECTORY).glob("*.jsonl"):
        for line in path.read_bytes().split(b"\n"):
            try:
                out.append(Batch.from_line(line))
            except ValueError:
                continue                # an empty or cut line
    return out


def checkpoint_at(store: Path) -> float:
    """When the state of the last committed checkpoint was taken (0: none committed yet),
    read while the crawl writes (WAL: a reader sees the last commit)."""
    try:
        with closing(sqlite3.connect(f"file:{store}?mode=ro", uri=True)) as db:
            row = db.execute("select value from meta where key = 'checkpoint_at'").fetchone()
    except sqlite3.Error:           # not created yet
        return 0.0
    return float(row[0]) if row else 0.0


def items(tmp: Path) -> list[dict]:
    """The items emitted so far: the complete lines of ITEMS (one may be half written)."""
    path = tmp / "items.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().split("\n")[:-1] if line.strip()]


def exported(tmp: Path) -> list[dict]:
    """The items in the crawl's feed export. A run killed while the exporter's buffer was
    being written leaves a line cut short, which the next run's first item continues: each
    item is read from where an item starts."""
    path = tmp / "items.jsonl.export"
    out = []
    for line in path.read_text().split("\n") if path.exists() else []:
        for part in line.split('{"source"')[1:]:
            try:
                out.append(json.loads('{"source"' + part))
            except json.JSONDecodeError:
                pass
    return out


def found(tmp: Path) -> set[tuple[str, str]]:
    """Every new entry a fetch found (source URL, entry key), over all runs."""
    path = tmp / "items.jsonl.found"
    return {tuple(json.loads(line)) for line in path.read_text().split("\n")[:-1]}


@pytest.mark.slow
def test_killed_crawls_restart_from_their_last_checkpoint(fast_web, tmp_path):
    # Each of runs 0-3 is killed at a random instant: once it has emitted n items (n drawn
    # from a seeded generator) and a checkpoint taken after all n is committed. Run 4 ends
    # by itself.
    rng = np.random.default_rng(11)
    store = tmp_path / "job" / FILE_NAME
    kills = []       # (snapshot at the kill, items emitted by then, n, the journal)
    for run in range(5):
        last = run == 4
        proc = start(fast_web, tmp_path, run, seconds=3.0 if last else 300.0)
        if last:
            proc.wait(120)
            assert proc.returncode == 0, log(tmp_path, run)[-3000:]
        else:
            first, n = len(items(tmp_path)), int(rng.integers(20, 80))

            def covered(first=first, n=n) -> bool:
                mine = items(tmp_path)[first:first + n]
                return len(mine) == n and checkpoint_at(store) > max(
                    i["discovered_at"] for i in mine)

            try:
                wait_for(covered, timeout=120, alive=proc,
                         what=f"run {run}'s checkpoint after its {n} first items")
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{log(tmp_path, run)[-3000:]}") from None
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            assert proc.returncode == -signal.SIGKILL
            kills.append((snapshot(store), len(items(tmp_path)), n, journal(tmp_path)))
        if run > 0:               # this run started from the previous kill's checkpoint
            dump = json.loads((tmp_path / f"dump{run}.json").read_text())
            before = kills[run - 1][0]
            for key in ("policy_rows", "etag", "retry_at", "failures"):
                assert dump[key] == before[key], key
            assert dump["origin"] == before["origin"]
            # the entries seen: the checkpoint's, and those of the journal's batches (handed
            # out again by the replay, not by the next fetch); the replay forgets none of the
            # checkpoint's for them (the bound, WHITTLE_MAX_ENTRIES_PER_SOURCE, is far off)
            replayed = kills[run - 1][3]
            for sid, (had, has) in enumerate(zip(before["entries"], dump["entries"],
                                                 strict=True)):
                assert hashes(has) == hashes(had) | replayed.get(sid, set())
    emitted = items(tmp_path)
    assert len(emitted) > kills[-1][1]          # the last run crawled on
    # an entry emitted before the checkpoint a run was killed after is never emitted again
    start_line = 0
    for snap, end_line, n, _ in kills:
        safe = {(i["source"], i["entry_id"]) for i in emitted[start_line:end_line]
                if i["discovered_at"] < snap["checkpoint_at"]}
        later = {(i["source"], i["entry_id"]) for i in emitted[end_line:]
                 if not i["replayed"]}
        assert not safe & later
        assert len(safe) >= n      # the run's n first items, distinct, all checkpointed
        start_line = end_line


@pytest.mark.slow
def test_no_item_is_lost_over_random_kills(fast_web, tmp_path):
    # 20 runs killed at instants drawn from a seeded generator (while Scrapy starts, while
    # it restores, while it crawls, while a checkpoint is written: wherever they fall), then
    # one that ends by itself: every entry any run's fetches found new reached the pipelines
    # and the feed export.
    rng = np.random.default_rng(29)
    kills = 20
    for run in range(kills + 1):
        last = run == kills
        proc = start(fast_web, tmp_path, run, seconds=3.0 if last else 300.0)
        if last:
            proc.wait(120)
            assert proc.returncode == 0, log(tmp_path, run)[-3000:]
            break
        try:
            proc.wait(float(rng.uniform(1.0, 4.0)))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
        assert proc.returncode == -signal.SIGKILL, log(tmp_path, run)[-3000:]
    seen = found(tmp_path)
    received = {(i["source"], i["entry_id"]) for i in items(tmp_path)}
    in_export = {(i["source"], i["entry_id"]) for i in exported(tmp_path)}
    assert len(seen) > 500                       # the runs did crawl
    assert seen - received == set()
    assert seen - in_export == set()
    replayed = [i for i in items(tmp_path) if i["replayed"]]
    assert replayed                              # some kills did fall between fetch and pipeline
    assert "Traceback" not in "".join(log(tmp_path, r) for r in range(kills + 1))


@pytest.mark.slow
def test_no_item_is_lost_over_random_kills_with_articles_on(fast_web, tmp_path):
    # As above, with WHITTLE_ARTICLES: an entry's item waits for its page, so kills fall
    # while articles are queued, in flight or being extracted too. Every entry found reached
    # the pipelines, and what a run had not delivered came back with its article fetched
    # again.
    rng = np.random.default_rng(31)
    kills = 8
    for run in range(kills + 1):
        last = run == kills
        proc = start(fast_web, tmp_path, run, 3.0 if last else 300.0, "articles")
        if last:
            proc.wait(120)
            assert proc.returncode == 0, log(tmp_path, run)[-3000:]
            break
        try:
            proc.wait(float(rng.uniform(2.0, 5.0)))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
        assert proc.returncode == -signal.SIGKILL, log(tmp_path, run)[-3000:]
    seen = found(tmp_path)
    emitted = items(tmp_path)
    received = {(i["source"], i["entry_id"]) for i in emitted}
    assert len(seen) > 200                       # the runs did crawl
    # the last run ended (CLOSESPIDER_TIMEOUT) with articles still queued: their entries
    # stay in the journal, for the next run to hand out
    pending = {(b.url, e.key) for b in journal_batches(tmp_path) for e in b.entries}
    assert seen - received - pending == set()
    assert seen - {(i["source"], i["entry_id"]) for i in exported(tmp_path)} - pending == set()
    with_text = [i for i in emitted if i["text"]]
    assert len(with_text) == len(emitted)        # every page was fetched and extracted
    assert [i for i in emitted if i["replayed"]]   # some kills fell while articles were out
    logs = "".join(log(tmp_path, r) for r in range(kills + 1))
    assert "Traceback" not in logs, logs[logs.index("Traceback") - 2000:][:5000]


@pytest.fixture(scope="module")
def sites_web():
    """2 news sites sharing 8 feeds, and a site without feeds."""
    server = Server("--scenario", "news-mix", "--n", "8", "--speed", "36000", "--seed", "5",
                    "--sites", "2")
    with urlopen(f"{server.url}/sites.json") as answer:
        server.sites = {s["url"]: sorted(s["feeds"]) for s in json.load(answer)["sites"]}
    yield server
    server.stop()


def searched(tmp: Path) -> dict[str, list[str]]:
    """The sites the crawl's site table holds, each with the feeds found on it."""
    table = SiteTable.in_jobdir(tmp / "job")
    try:
        table.load()
    finally:
        table.close()
    return {site: sorted(f.url for f in record.feeds) for site, record in table.sites.items()}


def test_a_damaged_state_file_and_a_kill_while_sites_are_searched_lose_nothing(
        sites_web, tmp_path):
    # the crawl starts on a damaged state file (moved aside: a fresh crawl), and is killed
    # once a site's search has ended, while the other sites are still being searched (a
    # search's requests go first, at one every 0.05 s: the feeds wait); the restart
    # searches those (the searched one it remembers, its feeds joining the crawl from the
    # site table) and delivers every entry its fetches find
    job = tmp_path / "job"
    job.mkdir()
    (job / FILE_NAME).write_bytes(b"SQLite format 3\x00" + b"\xff" * 5000)   # truncated
    proc = start(sites_web, tmp_path, 0, 300.0, "sites")
    wait_for(lambda: searched(tmp_path), timeout=120, alive=proc, what="a site searched")
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    assert proc.returncode == -signal.SIGKILL, log(tmp_path, 0)[-3000:]
    assert log(tmp_path, 0).count("moved aside") == 1
    before = searched(tmp_path)
    assert 1 <= len(before) < len(sites_web.sites), before    # searches were under way
    proc = start(sites_web, tmp_path, 1, 300.0, "sites")

    def complete() -> bool:
        received = {(i["source"], i["entry_id"]) for i in items(tmp_path)}
        return (searched(tmp_path) == sites_web.sites
                and {s for s, _ in found(tmp_path)} == {f for fs in sites_web.sites.values()
                                                        for f in fs}
                and found(tmp_path) <= received)

    try:
        wait_for(complete, timeout=120, alive=proc,
                 what="every site searched, every entry found delivered")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{log(tmp_path, 1)[-3000:]}") from None
    proc.send_signal(signal.SIGTERM)                  # Scrapy's graceful stop
    proc.wait(60)
    assert proc.returncode == 0, log(tmp_path, 1)[-3000:]
    assert "Traceback" not in log(tmp_path, 0) + log(tmp_path, 1)
    assert "moved aside" not in log(tmp_path, 1)      # the fresh state, written and read
    # a site searched before the kill was not searched again
    assert [site for site in before if f"site search: {site} names" in log(tmp_path, 1)] == []
