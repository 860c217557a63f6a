"""The package as a user gets it: ``python -m build`` makes an sdist and, from it, a wheel;
the wheel, installed in a fresh virtual environment (no source tree on ``sys.path``), runs the
example project's crawl of its embedded simulated web. This catches a module or data file
left out of the package, which the editable install of the other tests never sees. The wheel
holds ``scrapy_whittle`` alone: the simulated web (``sim``) is the repository's, not a
top-level name the package claims in a user's environment; the example project, run in a
checkout, finds it in the repository root."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: what a source checkout holds that is no input of the build
NOT_SOURCES = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__",
                                     ".venv", ".pytest_cache", ".ruff_cache", ".scrapy",
                                     "*.jsonl", "out")


def run(*cmd, cwd: Path, timeout: float, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc


@pytest.mark.slow
def test_the_built_wheel_installs_and_runs_the_example_in_a_clean_environment(tmp_path):
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    # built from a copy, so that no build/ directory of an earlier build leaks stale modules
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCES)
    run(sys.executable, "-m", "build", "--outdir", tmp_path / "dist", source, cwd=tmp_path,
        timeout=300)
    wheel, = (tmp_path / "dist").glob("scrapy_whittle-*.whl")
    sdist, = (tmp_path / "dist").glob("scrapy_whittle-*.tar.gz")
    assert wheel.name == f"scrapy_whittle-{version}-py3-none-any.whl"
    packages = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()
                if not name.split("/")[0].endswith(".dist-info")}
    assert packages == {"scrapy_whittle"}, packages

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    # the interpreter's own environment only: no PYTHONPATH, no user site
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env |= {"PYTHONNOUSERSITE": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    # --no-compile: byte-compiling every dependency up front is pip's default, not part of
    # what is checked here (the modules the crawl imports compile as they load)
    run(python, "-m", "pip", "install", "-q", "--no-compile", "-c", ROOT / "constraints.txt",
        wheel, cwd=tmp_path, env=env, timeout=600)

    # the example project in the checkout (the copy the wheel was built from): the package
    # from the environment, the simulated web from the checkout's root
    project = source / "example_project"
    where = run(python, "-c", "import news_crawler, scrapy_whittle, sim; "
                "print(scrapy_whittle.__version__); print(scrapy_whittle.__file__); "
                "print(sim.__file__)", cwd=project, env=env, timeout=60).stdout.split()
    assert where[0] == version
    assert Path(where[1]).is_relative_to(env_dir), where
    assert Path(where[2]) == source / "sim" / "__init__.py", where
    outside = subprocess.run([python, "-c", "import sim"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=60)
    assert "No module named 'sim'" in outside.stderr, outside.stderr[-2000:]

    # a few seconds of crawl: enough for the first epochs' items and the closing summary
    # that the assertions read (tests/scrapy/test_serve.py runs the same crawl as long)
    crawl = run(env_dir / "bin" / "scrapy", "crawl", "news", "-s", "CLOSESPIDER_TIMEOUT=4",
                "-s", "SIM_SOURCES=50", "-s", "TELNETCONSOLE_ENABLED=False",
                "-O", "items.jsonl", cwd=project, env=env, timeout=120)
    assert "Whittle summary" in crawl.stderr and "round_robin =" in crawl.stderr, \
        crawl.stderr[-3000:]
    assert "Traceback" not in crawl.stderr and "] ERROR:" not in crawl.stderr, \
        crawl.stderr[-3000:]
    items = [json.loads(line) for line in (project / "items.jsonl").read_text().splitlines()]
    assert items and all(re.match(r"http://127\.0\.0\.1:\d+/item/", i["link"]) for i in items)
    assert sdist.stat().st_size > 0
