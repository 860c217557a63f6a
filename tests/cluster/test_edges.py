"""The edges of a cluster crawl a user meets first: Redis not there at start-up, the Redis
client not installed, Redis gone while the crawl closes, a source list at a URL, and the
progress line of each process.

A crawl that cannot start stops ``scrapy crawl`` before the spider opens with one ERROR line
and exit status 1, as a bad setting does (``tests/scrapy/test_startup.py``, whose project and
helpers these tests share)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.cluster.conftest import free_port
from tests.scrapy.conftest import ROOT
from tests.scrapy.test_startup import error_lines, project, scrapy  # noqa: F401 (fixture)

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
    assert "WHITTLE_REDIS_URL ('redis://127.0.0.1:1/0') needs the Redis client" in line
    assert "pip install 'scrapy-whittle[cluster]'" in line
    assert "Traceback" not in result.stderr and "Spider opened" not in result.stderr


def test_a_crawl_closes_on_time_while_redis_is_gone(redis_server, tmp_path):
    """Redis goes away mid-crawl, with fetches in flight (a slow web): the crawl pauses, and
    CLOSESPIDER_TIMEOUT still closes it, without an error or a traceback."""
    import json

    from tests.processes import spawn
    from tests.scrapy.conftest import Server
    from tests.waiting import wait_for

    web = Server("--scenario", "news-mix", "--n", "10", "--speed", "36000", "--latency", "0.5",
                 "--seed", "3")
    try:
        log = tmp_path / "w0.log"
        proc = spawn([sys.executable, "-m", "sim.cluster_crawl", redis_server.url, web.url, "10",
                      str(tmp_path / "w0.jsonl"), "8", json.dumps({"WHITTLE_REDIS_WAIT": 1})],
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
