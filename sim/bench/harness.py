"""What the benchmarks share on the command line: a parser named after the benchmark's
command, and the report printed as one JSON object (``--json``) or as the benchmark's table.

The processes they start (the simulated web's server, a measured child) are
``sim.crawls.children``'.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any


def parser(name: str, doc: str | None, **kwargs: Any) -> argparse.ArgumentParser:
    """The parser of ``python -m sim.bench NAME``, described by the first line of ``doc``
    (the benchmark module's docstring) unless ``description`` is given."""
    kwargs.setdefault("description", (doc or "").split("\n")[0] or None)
    return argparse.ArgumentParser(prog=f"python -m sim.bench {name}", **kwargs)


def emit(report: Any, as_json: bool, render: Callable[[Any], str], **dumps: Any) -> None:
    """Print ``report``: one JSON object (``json.dumps`` with ``dumps``) or ``render``'s text."""
    print(json.dumps(report, **dumps) if as_json else render(report))
