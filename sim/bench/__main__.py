"""``python -m sim.bench [NAME] [options]``: benchmark NAME, or with no NAME (the first
argument an option, or none) the crawl policies' benchmark (``sim.bench.policies``)."""

from __future__ import annotations

import importlib
import sys

from sim.bench import BENCHMARKS, listing, module_of


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        from sim.bench import policies

        return policies.main(argv)
    name, *rest = argv
    if name not in BENCHMARKS:
        print(f"python -m sim.bench: no benchmark {name!r}; the benchmarks:\n{listing()}",
              file=sys.stderr)
        return 2
    return importlib.import_module(module_of(name)).main(rest) or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
