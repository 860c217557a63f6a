"""The edges of a cluster crawl a user meets first: Redis not there at start-up, the Redis
client not installed, Redis gone while the crawl closes, a source list at a URL, and the
progress line of each process.

A crawl that cannot start stops ``scrapy crawl`` before the spider opens with one ERROR line
and exit status 1, as a bad setting does (``tests/scrapy/test_startup.py``, whose project and
helpers these tests share)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from scrapy_whittle.cluster.keys import Keys
from tests.cluster.conftest import free_port, source_urls
from tests.processes import spawn
from tests.scrapy.conftest import ROOT, Server
from tests.scrapy.test_startup import error_lines, project, scrapy  # noqa: F401 (fixture)
from tests.waiting import wait_for

SHORT = ("CLOSESPIDER_TIMEOUT=0.5", "TELNETCONSOLE_ENABLED=0")


def settings_args(*settings: str) -> list[str]:
    args = []
    for s in (*SHORT, *settings):
        args += ["-s", s]
    return args


def test_an_unreachable_redis_stops_the_crawl_at_start(project):  # noqa: F811
    url = f"redis://127.0.0.1:{free_port()}/0"         # nothing listens there
    result = scrapy(project, "crawl", "news",
                    *settings_args(f"WHITTLE_REDIS_URL={url}", "WHITTLE_REDIS_WAIT=0.5"),
                    timeout=30)
    assert result.returncode == 1, result.stderr[-3000:]
    (line,) = error_lines(result.stderr)
    assert f"WHITTLE_REDIS_URL ('{url}') did not answer within 0.5 s (WHITTLE_REDIS_WAIT): " \
           "ConnectionError" in line, line
    assert "Traceback" not in result.stderr and "Spider opened" not in result.stderr


def test_a_password_is_not_shown_in_the_error(project):  # noqa: F811
    url = f"redis://:secret@127.0.0.1:{free_port()}/0"
    result = scrapy(project, "crawl", "news",
                    *settings_args(f"WHITTLE_REDIS_URL={url}", "WHITTLE_REDIS_WAIT=0.2"),
                    timeout=30)
    assert result.returncode == 1
    (line,) = error_lines(result.stderr)
    assert "redis://:***@127.0.0.1" in line and "secret" not in result.stderr


def test_without_the_redis_client_the_crawl_says_what_to_install(project):  # noqa: F811
    # redis is installed here: the child process blocks its import, as if it were not
    code = ("import sys; sys.modules['redis'] = None\n"
            "from scrapy.cmdline import execute\n"
            f"execute(['scrapy', 'crawl', 'news', *{settings_args('WHITTLE_REDIS_URL=redis://127.0.0.1:1/0')!r}])\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
        str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-c", code], cwd=project, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr[-3000:]
    (line,) = error_lines(result.stderr)
    assert "WHITTLE_REDIS_URL ('redis://127.0.0.1:1/0') needs the package 'redis'" in line
    assert "pip install 'scrapy-whittle[cluster]'" in line
    assert "Traceback" not in result.stderr and "Spider opened" not in result.stderr


def test_a_crawl_begun_in_an_older_key_layout_stops_at_start_saying_what_to_do(
        project, redis_server):  # noqa: F811
    with redis_server.client() as client:         # what an earlier version left there
        client.hset("whittle:news:meta", mapping={"origin": "1700000000.0",
                                                  "checkpoint_seq": 3})
        client.rpush("whittle:news:urls", "https://a.example/feed.xml")
    result = scrapy(project, "crawl", "news",
                    *settings_args(f"WHITTLE_REDIS_URL={redis_server.url}"), timeout=60)
    assert result.returncode == 1, result.stderr[-3000:]
    (line,) = error_lines(result.stderr)
    assert "the crawl under WHITTLE_REDIS_PREFIX 'whittle:news' was begun by an earlier " \
           "scrapy-whittle" in line and "docs/upgrading.md" in line, line
    assert "Traceback" not in result.stderr and "Spider opened" not in result.stderr
    with redis_server.client() as client:         # nothing of it touched
        assert client.hgetall("whittle:news:meta") == {b"origin": b"1700000000.0",
                                                       b"checkpoint_seq": b"3"}


def test_a_crawl_closes_on_time_while_redis_is_gone(redis_server, tmp_path):
    """Redis goes away mid-crawl, with fetches in flight (a slow web): the crawl pauses, and
    CLOSESPIDER_TIMEOUT still closes it, without an error or a traceback."""
    web = Server("--scenario", "news-mix", "--n", "10", "--speed", "36000", "--latency", "0.5",
                 "--seed", "3")
    try:
        log = tmp_path / "w0.log"
        proc = spawn([sys.executable, "-m", "sim.crawls.cluster_crawl", redis_server.url,
                      web.url, "10", str(tmp_path / "w0.jsonl"), "8",
                      json.dumps({"WHITTLE_REDIS_WAIT": 1})],
                     log=log, cwd=ROOT)
        wait_for(lambda: "took over" in log.read_text(), timeout=60, alive=proc,
                 what="a planner")
        wait_for(lambda: (tmp_path / "w0.jsonl").exists(), timeout=60, alive=proc,
                 what="a first item")
        redis_server.stop()
        proc.wait(60)
    finally:
        web.stop()
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    assert text.index("Redis unreachable") < text.index("Closing spider (closespider_timeout)")
    assert "Traceback" not in text and not error_lines(text), text[-3000:]
    assert "Spider closed (closespider_timeout)" in text


N_FEEDS = 12


@pytest.fixture(scope="module")
def web():
    server = Server("--scenario", "news-mix", "--n", str(N_FEEDS), "--speed", "36000",
                    "--latency", "0.02", "--seed", "5")
    yield server
    server.stop()


def cluster_process(redis, web, tmp_path, name: str, **settings) -> subprocess.Popen:
    return spawn([sys.executable, "-m", "sim.crawls.cluster_crawl", redis.url, web.url,
                  str(N_FEEDS), str(tmp_path / f"{name}.jsonl"), "300", json.dumps(settings)],
                 log=tmp_path / f"{name}.log", cwd=ROOT)


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    assert proc.returncode == 0


PROGRESS = re.compile(r"this process (\d+) crawls .* (\d+) new items.*; the cluster (\d+) "
                      r"crawls \(at [\d.]+/min\), (\d+) sources")


def test_the_progress_line_of_a_cluster_process_shows_it_and_the_cluster(redis_server, web,
                                                                          tmp_path):
    log = tmp_path / "w0.log"
    proc = cluster_process(redis_server, web, tmp_path, "w0", WHITTLE_LOGSTATS_INTERVAL=0.2)

    def progress():
        lines = [m for m in map(PROGRESS.search, log.read_text().splitlines()) if m]
        # (the cluster's figures are read from Redis every second: they lag this process's)
        return next((m for m in lines if int(m[1]) > 0 and int(m[3]) > 0), None)

    line = wait_for(progress, timeout=60, alive=proc, what="a progress line with crawls")
    stop(proc)
    mine, _items, everyone, sources = map(int, line.groups())
    assert mine > 0 and everyone > 0 and sources == N_FEEDS


def test_a_cluster_reads_a_source_list_at_a_url(redis_server, web, tmp_path):
    """The planner fetches ``WHITTLE_SOURCES`` at a URL (as ``sim.serve`` prints it) and
    refreshes it; the workers crawl its sources through Redis."""
    names = ["w0", "w1"]
    procs = [cluster_process(redis_server, web, tmp_path, name,
                             WHITTLE_SOURCES=f"{web.url}/feeds.opml",
                             WHITTLE_SOURCES_REFRESH=0.5) for name in names]
    client = redis_server.client()

    def items() -> list[dict]:
        rows = []
        for name in names:
            path = tmp_path / f"{name}.jsonl"
            rows += [json.loads(line) for line in
                     (path.read_text().split("\n")[:-1] if path.exists() else ())]
        return rows

    wait_for(lambda: len({i["source"] for i in items()}) >= N_FEEDS // 2, timeout=60,
             what="items from half the listed sources")
    for proc in procs:
        stop(proc)
    assert len(source_urls(client, Keys("test:feeds"))) == N_FEEDS
    logs = "".join((tmp_path / f"{name}.log").read_text() for name in names)
    assert f"{N_FEEDS} sources joined" in logs
    assert "Traceback" not in logs and not error_lines(logs)
