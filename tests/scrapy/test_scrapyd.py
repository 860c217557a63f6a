"""The example project under a real Scrapyd (docs/deploy.md): started on a free port with its
own directories, the project deployed with ``scrapyd-deploy`` as a user does, the re-crawl
scheduled through the JSON API, seen crawling, cancelled (Scrapyd signals the crawl: a clean
stop that writes its checkpoint), scheduled again on the same ``JOBDIR`` and seen resuming
from it."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

from tests.processes import spawn
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "news_crawler"
BIN = Path(sys.executable).parent

#: what the crawl is scheduled with: a small simulated web, a progress line every half
#: second; CLOSESPIDER_TIMEOUT ends a crawl a failed test leaves behind on its own
SETTINGS = {"SIM_SOURCES": 30, "WHITTLE_LOGSTATS_INTERVAL": 0.5, "CLOSESPIDER_TIMEOUT": 120,
            "FEEDS": "{}"}
PROGRESS = re.compile(r"Whittle \(whittle\): (\d+) crawls")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Scrapyd:
    """A scrapyd process in ``home`` (its config, eggs, logs and queue databases there)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        home.mkdir()
        (home / "scrapyd.conf").write_text(
            "[scrapyd]\n"
            f"bind_address = 127.0.0.1\nhttp_port = {self.port}\n"
            "eggs_dir = eggs\nlogs_dir = logs\ndbs_dir = dbs\nitems_dir =\n"
            "poll_interval = 0.1\nmax_proc = 2\n")
        # the deployed egg holds news_crawler alone: its crawls reach the simulated web, the
        # repository's sim (no part of the installed package), through PYTHONPATH
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
            str(ROOT), os.environ.get("PYTHONPATH")]))}
        self.proc = spawn([sys.executable, "-m", "scrapyd", "--pidfile", ""],
                          log=home / "scrapyd.log", cwd=home, env=env)
        wait_for(lambda: self.get("daemonstatus.json", quiet=True), timeout=30,
                 what="scrapyd to answer", alive=self.proc)

    def get(self, endpoint: str, *, quiet: bool = False, **params) -> dict | None:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}/{endpoint}{query}", timeout=5) as r:
                return json.load(r)
        except OSError:
            if quiet:
                return None
            raise

    def post(self, endpoint: str, fields: list[tuple[str, str]]) -> dict:
        data = urllib.parse.urlencode(fields).encode()
        with urllib.request.urlopen(f"{self.url}/{endpoint}", data, timeout=5) as r:
            answer = json.load(r)
        assert answer["status"] == "ok", answer
        return answer

    def schedule(self, jobdir: Path) -> str:
        settings = {**SETTINGS, "JOBDIR": str(jobdir)}
        return self.post("schedule.json", [("project", PROJECT), ("spider", "news")] + [
            ("setting", f"{k}={v}") for k, v in settings.items()])["jobid"]

    def state(self, job: str) -> str | None:
        jobs = self.get("listjobs.json", project=PROJECT)
        return next((state for state in ("pending", "running", "finished")
                     for j in jobs[state] if j["id"] == job), None)

    def log(self, job: str) -> str:
        path = self.home / "logs" / PROJECT / "news" / f"{job}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def crawls(self, job: str) -> int:
        """The crawls the job's latest progress line counts (0 before the first)."""
        counts = PROGRESS.findall(self.log(job))
        return int(counts[-1]) if counts else 0

    def stop(self) -> None:
        jobs = self.get("listjobs.json", quiet=True, project=PROJECT) or {}
        for job in jobs.get("pending", []) + jobs.get("running", []):
            self.post("cancel.json", [("project", PROJECT), ("job", job["id"])])
        for job in jobs.get("running", []):      # a crawl ends itself; scrapyd does not wait
            wait_for(lambda job=job: self.state(job["id"]) == "finished", timeout=60,
                     what=f"job {job['id']} to finish")
        self.proc.terminate()
        self.proc.wait(30)


def deploy(scrapyd: Scrapyd, tmp: Path) -> None:
    """``scrapyd-deploy`` in a copy of example_project/ (it writes a setup.py there)."""
    project = tmp / "project"
    shutil.copytree(ROOT / "example_project", project,
                    ignore=shutil.ignore_patterns("__pycache__", "items.jsonl"))
    (project / "scrapy.cfg").write_text(
        f"[settings]\ndefault = {PROJECT}.settings\n\n"
        f"[deploy]\nurl = {scrapyd.url}/\nproject = {PROJECT}\n")
    done = subprocess.run([BIN / "scrapyd-deploy", "--version", "1"], cwd=project,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"status": "ok"' in done.stdout + done.stderr, done.stdout + done.stderr
    assert scrapyd.get("listspiders.json", project=PROJECT)["spiders"] == ["news"]


def test_scheduled_cancelled_and_resumed_under_scrapyd(tmp_path):
    scrapyd = Scrapyd(tmp_path / "scrapyd")
    try:
        deploy(scrapyd, tmp_path)
        jobdir = tmp_path / "jobdir"
        first = scrapyd.schedule(jobdir)
        wait_for(lambda: scrapyd.state(first) == "running", timeout=30,
                 what="the job to run", alive=scrapyd.proc)
        wait_for(lambda: scrapyd.crawls(first) > 0, timeout=60,
                 what="the job's progress line to count crawls", alive=scrapyd.proc)

        scrapyd.post("cancel.json", [("project", PROJECT), ("job", first)])
        wait_for(lambda: scrapyd.state(first) == "finished", timeout=60,
                 what="the cancelled job to finish", alive=scrapyd.proc)
        log = scrapyd.log(first)
        assert "Received SIG" in log and "Spider closed (shutdown)" in log, log[-3000:]
        assert "Whittle summary" in log, log[-3000:]
        assert "Traceback" not in log and "] ERROR:" not in log, log[-3000:]
        assert (jobdir / "whittle.sqlite").stat().st_size > 0
        crawled = scrapyd.crawls(first)

        second = scrapyd.schedule(jobdir)
        restored = wait_for(
            lambda: re.search(r"re-crawl service: restored (\d+) sources from",
                              scrapyd.log(second)), timeout=60,
            what="the second job to restore the state", alive=scrapyd.proc)
        assert int(restored[1]) == SETTINGS["SIM_SOURCES"]
        wait_for(lambda: scrapyd.crawls(second) > 0, timeout=60,
                 what="the resumed job to crawl", alive=scrapyd.proc)
        assert crawled > 0
    finally:
        scrapyd.stop()
