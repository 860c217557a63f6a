"""``scrapy whittle report`` and ``scrapy whittle sources`` on a real crawl's JOBDIR.

The crawl (tests/scrapy/report_crawl.py) runs two simulated days through the add-on; the
commands run as a user runs them, through the ``scrapy.commands`` entry point that
pyproject.toml declares; the page is rendered in headless Chromium, where every figure must
load; the plan the report shows is what the crawl does when it resumes."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import tomllib
from contextlib import closing
from pathlib import Path

import pytest

from scrapy_whittle.service.state.store import FILE_NAME
from tests.scrapy.conftest import ROOT, START
from tests.scrapy.report_crawl import BROKEN, BUDGET, N_FEEDS

EPOCHS = 48


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_crawl(jobdir: Path, start: float, epochs: int, port: int) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tests.scrapy.report_crawl", str(jobdir), repr(start),
         str(epochs), str(port)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.fixture(scope="module")
def crawled(tmp_path_factory):
    """(JOBDIR of a finished crawl, its web's port, a PYTHONPATH entry declaring the
    pyproject's scrapy.commands entry points)."""
    tmp = tmp_path_factory.mktemp("report")
    port = free_port()
    run_crawl(tmp / "job", START, EPOCHS, port)
    return tmp / "job", port, entry_points(tmp / "meta")


def entry_points(where: Path) -> Path:
    """A distribution whose only content is the ``scrapy.commands`` entry points of this
    checkout's pyproject.toml, as ``pip install`` registers them (the installed copy of the
    package may predate them)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    commands = project["project"]["entry-points"]["scrapy.commands"]
    info = where / "scrapy_whittle_commands_under_test-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: scrapy-whittle-commands-under-test\nVersion: 0\n")
    (info / "entry_points.txt").write_text(
        "[scrapy.commands]\n" + "".join(f"{k} = {v}\n" for k, v in commands.items()))
    return where


def scrapy(meta: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(meta), str(ROOT)])}
    return subprocess.run([sys.executable, "-m", "scrapy.cmdline", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def store_rows(jobdir: Path) -> dict[str, tuple]:
    uri = f"{(jobdir / FILE_NAME).as_uri()}?mode=ro&immutable=1"
    with closing(sqlite3.connect(uri, uri=True)) as db:
        return {r[0]: r[1:] for r in db.execute("select url, crawls, errors from sources")}


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def test_sources_prints_every_source_as_the_store_has_it(crawled, tmp_path):
    from scrapy_whittle.report import load_report
    from scrapy_whittle.report.table import budget_sentence, percent

    jobdir, _, meta = crawled
    before = files(jobdir)
    result = scrapy(meta, "whittle", "sources", str(jobdir), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("url "))
    body = lines[header + 1:]
    assert len(body) == N_FEEDS + len(BROKEN)
    stored = store_rows(jobdir)
    columns = re.split(r"\s{2,}", lines[header])
    seen = {}
    for line in body:
        cells = re.split(r"\s{2,}", line)
        row = dict(zip(columns, cells, strict=True))
        seen[row["url"]] = (int(row["crawls"]), int(row["errors"]))
    assert seen == stored
    assert sum(c for c, _ in seen.values()) == BUDGET * EPOCHS      # the whole budget used
    # the budget curve, with the crawl's budget marked, as the report computes it
    curve = load_report(jobdir).budget_curve
    assert curve.sources == N_FEEDS and curve.left_out == len(BROKEN)
    rows = {}
    for line in lines[:header]:
        if m := re.fullmatch(r"#\s+([\d.]+)\s+(>?[\d.]+%)(?:\s+<- (.*))?", line):
            rows[float(m.group(1))] = (m.group(2), m.group(3) or "")
    assert rows[BUDGET] == (percent(curve.share_at(BUDGET)), "WHITTLE_BUDGET")
    assert rows[curve.saturation] == ("100%", "every source with value, every hour")
    assert len(rows) >= 5 and all(curve.share_at(b) >= 0 for b in rows)
    assert budget_sentence(load_report(jobdir)) in result.stdout
    indices = [float(re.split(r"\s{2,}", line)[4]) for line in body]
    assert indices == sorted(indices, reverse=True)
    assert files(jobdir) == before                     # read only: nothing written, nothing new


def test_the_plan_shown_is_what_the_resumed_crawl_does(crawled, tmp_path):
    from scrapy_whittle.report import load_report

    jobdir, port, _ = crawled
    copy = tmp_path / "job"
    shutil.copytree(jobdir, copy)
    report = load_report(copy)
    assert report.ranks and not report.no_plan
    planned = set(report.sources["url"][report.sources["planned"]].tolist())
    assert len(planned) == BUDGET
    before = store_rows(copy)
    run_crawl(copy, report.at, 1, port)                 # resume for one epoch
    after = store_rows(copy)
    crawled_now = {url for url, row in after.items() if row[0] > before[url][0]}
    assert crawled_now == planned


def render(page: Path, profile: Path) -> list[int]:
    """The natural width of every <img> of ``page`` once Chromium has loaded it (0: not
    loaded), read from the DOM Chromium dumps after a probe script marked them; the last
    is a control, an image that does not exist, which must read 0."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("headless Chromium renders the report page in this test: install it "
                    "(Debian: apt-get install chromium; .ci/run does)")
    probe = ("<script>addEventListener('load', () => document.body.setAttribute("
             "'data-widths', JSON.stringify([...document.images].map("
             "i => i.complete ? i.naturalWidth : 0))));</script>")
    checked = page.with_name(f"probe-{page.name}")
    control = '<img src="no-such-figure.png">'
    checked.write_text(page.read_text().replace("</body>", control + probe + "</body>"))
    try:
        result = subprocess.run(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
             "--virtual-time-budget=10000", "--dump-dom", checked.as_uri()],
            capture_output=True, text=True, timeout=120)
    finally:
        checked.unlink()
    match = re.search(r'data-widths="([^"]*)"', result.stdout)
    assert match, result.stderr[-2000:]
    *widths, missing = json.loads(html.unescape(match.group(1)))
    assert missing == 0                         # the probe sees a missing image as one
    return widths


def screenshot(page: Path, target: Path, profile: Path) -> None:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--user-data-dir={profile}", "--window-size=1200,2600",
                    f"--screenshot={target}", page.as_uri()],
                   capture_output=True, timeout=120, check=True)


def test_the_report_page_shows_every_figure_in_a_browser(crawled, tmp_path):
    jobdir, _, meta = crawled
    before = files(jobdir)
    out = tmp_path / "report"
    result = scrapy(meta, "whittle", "report", str(jobdir), "-o", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert files(jobdir) == before
    page = out / "index.html"
    text = page.read_text()
    images = re.findall(r'<img src="([^"]+)"', text)
    assert sorted(images) == sorted(p.name for p in out.glob("*.png"))
    assert set(images) == {"allocation.png", "timeline.png", "errors.png", "index.png",
                           "budget.png"}
    widths = render(page, tmp_path / "profile")
    assert len(widths) == len(images) and all(w > 0 for w in widths), widths
    screenshot(page, tmp_path / "screenshot.png", tmp_path / "profile")
    assert (tmp_path / "screenshot.png").stat().st_size > 10_000
    # what the page says: every source, and each error kind of the crawl with its count
    assert text.count("<tr") == 1 + N_FEEDS + len(BROKEN)
    for url in store_rows(jobdir):
        assert html.escape(url) in text
    # the budget curve's sentence, its figures those of the crawl's learned parameters
    from scrapy_whittle.report import load_report

    curve = load_report(jobdir).budget_curve
    sentence = re.search(r'<p class="budget">At ([\d.]+) crawls an hour you capture (\d+)% of '
                         r"what ([\d.]+) would; ([\d.]+) would capture (\d+)%.</p>", text)
    assert sentence, text
    now, share, saturation, more, more_share = map(float, sentence.groups())
    assert (now, saturation, more) == (BUDGET, curve.saturation, 2 * BUDGET)
    assert share == round(100 * curve.share_at(BUDGET)) < 100
    assert share < more_share == round(100 * curve.share_at(2 * BUDGET))


def test_the_report_without_matplotlib_says_how_to_get_the_figures(crawled, tmp_path,
                                                                  monkeypatch):
    from scrapy_whittle.report import figures, load_report, page

    jobdir, _, _ = crawled
    monkeypatch.setitem(sys.modules, "matplotlib", None)     # import matplotlib fails
    assert not figures.available()
    written = page.write(load_report(jobdir), tmp_path / "out")
    text = written.read_text()
    assert "<img" not in text and not list((tmp_path / "out").glob("*.png"))
    assert "matplotlib, which is not installed" in text and figures.INSTALL in html.unescape(
        text)
    assert text.count("<tr") == 1 + N_FEEDS + len(BROKEN)


def test_a_foreign_state_file_or_no_jobdir_is_an_error_message(crawled, tmp_path):
    _, _, meta = crawled
    foreign = tmp_path / "job"
    foreign.mkdir()
    (foreign / FILE_NAME).write_bytes(b"not a database at all" * 100)
    result = scrapy(meta, "whittle", "sources", str(foreign), cwd=tmp_path)
    assert result.returncode == 1 and "cannot be read" in result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in foreign.iterdir()) == [FILE_NAME]     # not moved aside
    result = scrapy(meta, "whittle", "sources", cwd=tmp_path)              # no JOBDIR
    assert result.returncode == 2 and "JOBDIR" in result.stderr
