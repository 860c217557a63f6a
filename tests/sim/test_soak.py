"""A short run of the soak (python -m sim.soak): a crawl of a web with every fault on, and
its report. The ten-minute run of docs/benchmarks.md is the same with --minutes 10."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from scrapy_whittle.scrapy.errors import ERROR_KINDS

ROOT = Path(__file__).resolve().parents[2]


def test_a_short_soak_crawls_a_hostile_web_without_traceback_or_duplicate(tmp_path):
    cmd = [sys.executable, "-m", "sim.soak", "--minutes", "0.1", "--feeds", "20",
           "--budget", "20", "--timeout", "2", "--bomb-mib", "16", "--copies", "1",
           "--sample", "1", "--json", "--out", str(tmp_path)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["exit_status"] == 0
    assert report["tracebacks"] == 0 and report["whittle_error_lines"] == 0
    assert report["duplicates"] == 0
    assert report["crawls"] > 0 and report["fetched"] > 0 and len(report["samples"]) >= 3
    assert report["errors"] and all(k in ERROR_KINDS or re.fullmatch(r"http_\d{3}", k)
                                    for k in report["errors"])
    assert report["peak_rss_mib"] > 0 and report["max_stall_ms"] is not None
    assert (tmp_path / "crawl.log").exists() and (tmp_path / "items.jsonl").exists()
