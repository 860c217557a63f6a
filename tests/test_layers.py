"""The package's layers, read from its imports: each layer imports only the layers before it,
the core and the service import no Scrapy, the package never imports the simulated web
(``sim``, the repository's test bed, which the package does not install), the web a crawl is
tested against imports nothing of the crawler, sim's groups import only the groups before
them (the web, then the crawls, then the benchmarks), and no module imports itself back
through others.

Every import counts, also one inside a function or under ``TYPE_CHECKING``: a cycle or a
dependency that is only deferred is still one a reader has to hold in mind.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("scrapy_whittle", "sim")

# What each layer of scrapy_whittle may import from the package (besides itself); "" is the
# package's own __init__ (the public names, most of them loaded on first use).
ALLOWED = {
    "": {"core"},
    "core": set(),
    "feeds": {"core"},
    "service": {"core", "feeds"},
    "cluster": {"core", "feeds", "service"},
    "report": {"core", "feeds", "service"},
    "scrapy": {"core", "feeds", "service", "cluster", "report"},
}
# Third-party packages a layer must not import (sim: no layer, test_the_package_never_imports_sim).
FORBIDDEN = {
    "": {"scrapy", "twisted", "redis"},
    "core": {"scrapy", "twisted", "redis"},
    "feeds": {"scrapy", "twisted", "redis"},
    "service": {"scrapy", "twisted", "redis"},
    "cluster": {"twisted"},
    "report": {"twisted", "redis"},
    "scrapy": set(),
}
#: the simulated web a crawl runs against: ``python -m sim.serve`` (the example project's web),
#: every module it imports and every module of ``sim.web``
SIM_WEB = "sim.serve"
#: what of the package the web may use: the models (core), the clock it shares with the crawl
#: (service), the trace format (report); never the crawler's adapters (scrapy, cluster), nor
#: Scrapy or Redis: a web that ran the crawler's code would agree with its bugs
SIM_WEB_ALLOWED = {"core", "service", "report"}
SIM_WEB_FORBIDDEN = {"scrapy", "redis"}
#: what each group of sim may import of sim besides itself: the web (sim.web) nothing, the
#: server (sim.serve) the web; the crawls and processes the benchmarks start, the web; the
#: benchmarks (and the papers' experiments, which run them) everything
SIM_GROUPS = {
    "sim.web": set(),
    "sim.serve": {"sim.web"},
    "sim.crawls": {"sim.web"},
    "sim.bench": {"sim", "sim.web", "sim.serve", "sim.crawls"},
    "sim.experiments": {"sim", "sim.web", "sim.serve", "sim.crawls", "sim.bench"},
    "sim.data": set(),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every module ``name`` imports: the package's own modules (resolved, relative imports
    included) and the top-level names of the others."""
    found = set()
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [module] + [f"{module}.{a.name}" for a in node.names]
        else:
            continue
        for target in targets:
            if target in known:
                found.add(target)
            elif target.split(".")[0] not in PACKAGES:
                found.add(target.split(".")[0])
    found.discard(name)
    return found


GRAPH = {name: imported(name, path, modules()) for name, path in modules().items()}


def layer(name: str) -> str | None:
    """The layer of a module of scrapy_whittle ("" for the package itself), None for sim's."""
    parts = name.split(".")
    if parts[0] != "scrapy_whittle":
        return None
    return parts[1] if len(parts) > 1 else ""


@pytest.mark.parametrize("name", sorted(n for n in GRAPH if layer(n) is not None))
def test_a_layer_imports_only_the_layers_before_it(name):
    own = layer(name)
    wrong = sorted(t for t in GRAPH[name]
                   if (t.startswith("scrapy_whittle.") and layer(t) not in {own} | ALLOWED[own])
                   or t in FORBIDDEN[own])
    assert not wrong, f"{name} ({own!r}) imports {wrong}"


def test_the_package_never_imports_sim():
    assert not [name for name in GRAPH
                if layer(name) is not None and any(t.split(".")[0] == "sim" for t in GRAPH[name])]


def test_neither_the_package_nor_sim_imports_the_tests():
    assert not [name for name in GRAPH if "tests" in GRAPH[name]]


def test_the_simulated_web_imports_nothing_of_the_crawler():
    web, todo = set(), [SIM_WEB, *(n for n in GRAPH if sim_group(n) == "sim.web")]
    while todo:                 # sim's modules only: the package's own are the layers' above
        name = todo.pop()
        if name not in web and name in GRAPH and layer(name) is None:
            web.add(name)
            todo.extend(GRAPH[name])
    wrong = {name: sorted(t for t in GRAPH[name]
                          if (layer(t) is not None and layer(t) not in SIM_WEB_ALLOWED)
                          or t in SIM_WEB_FORBIDDEN)
             for name in web}
    assert not {name: found for name, found in wrong.items() if found}
    assert {"sim.web.feedweb", "sim.web.sites", "sim.web.websub_hub"} <= web     # the web is read


def sim_group(name: str) -> str | None:
    """The group of sim a module is in (``sim.web``, ``sim.bench``, ...), None for sim's own
    __init__ and for the package's modules."""
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == "sim" and len(parts) > 1 else None


@pytest.mark.parametrize("name", sorted(n for n in GRAPH if sim_group(n)))
def test_a_group_of_sim_imports_only_the_groups_before_it(name):
    own = sim_group(name)
    wrong = sorted(t for t in GRAPH[name] if t.split(".")[0] == "sim"
                   and (sim_group(t) or "sim") not in {own} | SIM_GROUPS[own])
    assert not wrong, f"{name} ({own}) imports {wrong}"


def test_every_module_of_sim_is_in_a_group():
    assert {sim_group(n) for n in GRAPH if n.startswith("sim.")} == set(SIM_GROUPS)
    assert GRAPH["sim.bench.__main__"] >= {"sim.bench"}        # the graph reaches sim's groups



def test_no_import_cycles():
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:            # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in GRAPH[v] & GRAPH.keys():
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                cycles.append(sorted([v, *component]))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert cycles == [], cycles


def test_the_graph_is_read():
    # the checks above see the imports they are about
    assert "scrapy_whittle.core.dynamics" in GRAPH["scrapy_whittle.core.relaxation"]
    assert "scrapy" in GRAPH["scrapy_whittle.scrapy.addon"]
    assert "scrapy_whittle.core.policies" in GRAPH["scrapy_whittle"]


#: the longest a class of the package or of sim may be (lines, docstring included)
MAX_CLASS_LINES = 500


def test_no_class_is_longer_than_a_reader_can_hold():
    """A class past a few hundred lines holds several things: its parts become components
    it holds (the learned policy's, the service's, the cluster node's)."""
    long = {f"{name}.{node.name}": node.end_lineno - node.lineno + 1
            for name, path in modules().items()
            for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.ClassDef)
            and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES}
    assert long == {}
