"""The README's quick start and docs/report.md, run as a reader runs them: their code blocks
are read from the files, not copied here."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scrapy.conftest import ROOT
from tests.scrapy.test_report import entry_points


def code_blocks(path: Path, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", path.read_text(), re.S)


def block(path: Path, lang: str, first_line: str) -> str:
    (found,) = [b for b in code_blocks(path, lang) if b.splitlines()[0].strip() == first_line]
    return found


@pytest.fixture(scope="module")
def meta(tmp_path_factory) -> Path:
    return entry_points(tmp_path_factory.mktemp("meta"))


def run(cwd: Path, meta: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(meta), str(ROOT)])}
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def quick_start(tmp_path_factory, meta):
    """A project made as the README says, crawling the simulated web with the line sim.serve
    prints (for 3 s, JOBDIR crawls/news)."""
    readme = ROOT / "README.md"
    base = tmp_path_factory.mktemp("quickstart")
    assert run(base, meta, "scrapy.cmdline", "startproject", "news").returncode == 0
    project = base / "news"
    settings = project / "news" / "settings.py"
    settings.write_text(settings.read_text() + "\n" + block(readme, "python",
                                                            "# news/settings.py"))
    (project / "news" / "spiders" / "news.py").write_text(
        block(readme, "python", "# news/spiders/news.py"))
    serve = block(readme, "bash", "python -m sim.serve --n 300 --port 8000     # from this "
                                  "repository; keeps serving")
    argv = shlex.split(serve.splitlines()[0], comments=True)
    assert argv[:3] == ["python", "-m", "sim.serve"]
    argv = [a if a != "8000" else "0" for a in argv[3:]]          # a free port
    server = subprocess.Popen([sys.executable, "-m", "sim.serve", *argv], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in server.stdout:
            lines.append(line.strip())
            if line.startswith("PORT "):
                break
        (command,) = [line for line in lines if line.startswith("scrapy crawl ")]
        words = shlex.split(command)
        # WHITTLE_SOURCES names the server's /feeds.opml: fetched through Scrapy
        assert any(w.startswith("WHITTLE_SOURCES=http://") for w in words), words
        result = run(project, meta, "scrapy.cmdline", *words[1:], "-s", "JOBDIR=crawls/news",
                     "-s", "CLOSESPIDER_TIMEOUT=3", "-s", "TELNETCONSOLE_ENABLED=0")
    finally:
        server.terminate()
        server.wait(10)
        server.stdout.close()
    return project, result


def test_the_quick_start_crawls_the_simulated_web(quick_start):
    from scrapy_whittle.report import load_report

    project, result = quick_start
    assert result.returncode == 0, result.stderr[-3000:]
    assert not re.search(r"\] (ERROR|WARNING): ", result.stderr), result.stderr[-3000:]
    report = load_report(project / "crawls" / "news")
    assert report.n == 300 and report.policy == "whittle"     # WHITTLE_POLICY default
    assert len(report.epochs["epoch"]) >= 2
    assert report.completed_budget_use() == pytest.approx(1.0)
    assert report.sources["new_items"].sum() > 0


def test_the_readme_error_example_is_what_scrapy_crawl_prints(quick_start, meta):
    project, _ = quick_start
    readme = (ROOT / "README.md").read_text()
    example = re.search(r"```\n(\[scrapy_whittle\.scrapy\.startup\] ERROR: [^\n]*)\n```", readme)
    assert example, "the README's example of a start-up error"
    value = re.search(r"(WHITTLE_\w+) \('([^']*)'\)", example.group(1))
    result = run(project, meta, "scrapy.cmdline", "crawl", "news", "-s",
                 f"{value.group(1)}={value.group(2)}")
    assert result.returncode == 1
    (line,) = [x for x in result.stderr.splitlines() if "] ERROR: " in x]
    assert line.endswith(example.group(1))


def test_the_report_docs_run(quick_start, meta, monkeypatch, capsys):
    project, _ = quick_start
    doc = ROOT / "docs" / "report.md"
    (commands,) = [b for b in code_blocks(doc, "bash") if "scrapy whittle" in b]
    for line in commands.splitlines():
        words = shlex.split(line, comments=True)
        assert words[:2] == ["scrapy", "whittle"]
        result = run(project, meta, "scrapy.cmdline", *words[1:])
        assert result.returncode == 0, result.stderr[-2000:]
        if words[2] == "report":
            out = project / words[words.index("-o") + 1]
            images = re.findall(r'<img src="([^"]+)"', (out / "index.html").read_text())
            assert len(images) >= 3                   # no errors figure: no crawl failed
            assert sorted(images) == sorted(p.name for p in out.glob("*.png"))
        elif words[2] == "trace":              # the crawl's feeds, replayable
            from scrapy_whittle.report.trace import read_trace

            trace = read_trace(project / words[words.index("-o") + 1])
            assert len(trace.names) > 1 and trace.time.shape[0] > len(trace.names)
        else:
            rows = [x for x in result.stdout.splitlines() if x.startswith("http")]
            assert len(rows) == int(words[words.index("--limit") + 1])
    (example,) = code_blocks(doc, "python")
    monkeypatch.chdir(project)
    namespace: dict = {}
    exec(compile(example, str(doc), "exec"), namespace)
    assert len(namespace["planned"]) > 0
    printed = capsys.readouterr().out
    assert printed.startswith("300 whittle")
