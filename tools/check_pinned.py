#!/usr/bin/env python3
"""Fail when the installed environment differs from constraints.txt.

Walks the requirement tree of the installed scrapy-whittle with the extras that .ci/run
installs (markers evaluated for this interpreter), and reports every package of that tree
that constraints.txt does not pin, or that is installed at another version than pinned.
Only the tree is looked at, not all of site-packages: a CI runner or a developer's
environment may hold unrelated packages that the project's install never touched.

Usage: python tools/check_pinned.py [constraints.txt]     (exit status 1 on a difference)
       python tools/check_pinned.py --freeze       (prints that tree as name==version lines,
                                                    for tools/refresh-constraints)
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path

try:
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.version import InvalidVersion, Version
except ImportError:  # packaging comes with the [test] extra; pip always vendors a copy
    from pip._vendor.packaging.markers import default_environment
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.version import InvalidVersion, Version

PROJECT = "scrapy-whittle"
EXTRAS = ("test", "dqn", "experiments", "cluster", "report", "articles", "deploy",
          "monitoring")
# The installer's own tools: the install commands do not put them in the environment (the
# editable build takes setuptools from pyproject.toml's build-system, in an isolated
# environment), so they are checked only where constraints.txt pins them.
TOOLS = frozenset({"pip", "setuptools", "wheel"})
CONSTRAINTS = Path(__file__).resolve().parent.parent / "constraints.txt"

# name -> (installed version, its Requires-Dist strings), or None where not installed
Lookup = Callable[[str], "tuple[str, list[str]] | None"]


def canonical(name: str) -> str:
    """PEP 503's normalised name: pip treats Scrapy, scrapy and zope.interface/zope-interface
    alike, so a pin must match whatever spelling the metadata uses."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(lines: Iterable[str]) -> dict[str, str]:
    """constraints.txt's `name==version` lines, by canonical name. Anything else is an error
    rather than skipped: a range or a marker there would make "pinned" mean less."""
    pins: dict[str, str] = {}
    for number, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;=<>!~,]+)", line)
        if match is None:
            raise ValueError(f"constraints line {number}: {raw.strip()!r} is not name==version")
        name = canonical(match[1])
        if name in pins:
            raise ValueError(f"constraints line {number}: {match[1]} is pinned twice")
        pins[name] = match[2]
    return pins


def installed_lookup(name: str) -> tuple[str, list[str]] | None:
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None
    return dist.version, list(dist.requires or [])


def requirement_tree(root: str, extras: Iterable[str], lookup: Lookup,
                     environment: dict[str, str] | None = None,
                     ) -> tuple[dict[str, str], list[str]]:
    """(canonical name -> installed version for every package the root needs with these
    extras, root included; the required packages that are not installed)."""
    env = dict(default_environment() if environment is None else environment)
    versions: dict[str, str] = {}
    missing: list[str] = []
    seen: dict[str, set[str]] = {}            # canonical name -> extras already expanded
    todo: list[tuple[str, set[str]]] = [(root, {canonical(e) for e in extras})]
    while todo:
        name, wanted = todo.pop()
        key = canonical(name)
        done = seen.get(key)
        if done is not None and wanted <= done:
            continue
        # a package met again with more extras is expanded again: redis[hiredis] needs
        # hiredis even where redis was first reached without the extra
        seen[key] = (done or set()) | wanted
        found = lookup(name)
        if found is None:
            if key not in missing:
                missing.append(key)
            continue
        version, requires = found
        versions[key] = version
        for text in requires:
            req = Requirement(text)
            # a requirement without a marker always applies; one with an `extra == ...`
            # marker applies when one of the extras asked for is that extra
            if req.marker is not None and not any(
                    req.marker.evaluate({**env, "extra": extra})
                    for extra in (sorted(seen[key]) or [""])):
                continue
            todo.append((req.name, {canonical(e) for e in req.extras}))
    return versions, missing


def same_version(installed: str, pinned: str) -> bool:
    """PEP 440 equality, ignoring the installed version's local label when the pin has none:
    torch==2.13.0 is met by 2.13.0+cpu, as pip itself decides."""
    try:
        have, want = Version(installed), Version(pinned)
    except InvalidVersion:
        return installed == pinned
    if want.local is None:
        have = Version(have.public)
    return have == want


def differences(installed: dict[str, str], pins: dict[str, str],
                ignore: Iterable[str] = (PROJECT,)) -> list[str]:
    """One line per package of `installed` (canonical name -> version) that `pins` does not
    pin, or pins at another version. The installer's tools count only where pinned."""
    skip = {canonical(n) for n in ignore}
    problems = []
    for name in sorted(installed):
        if name in skip:
            continue
        version = installed[name]
        if name not in pins:
            if name not in TOOLS:
                problems.append(f"{name} {version} is installed but not pinned")
        elif not same_version(version, pins[name]):
            problems.append(f"{name} {version} is installed but pinned at {pins[name]}")
    return problems


def freeze(installed: dict[str, str], ignore: Iterable[str] = (PROJECT,)) -> list[str]:
    """`name==version` for each package of the tree, local labels dropped: the pins must hold
    on a machine that has the PyPI torch rather than this one's +cpu build. The installer's
    tools are kept where the tree needs them (torch requires setuptools at run time)."""
    skip = {canonical(n) for n in ignore}
    return [f"{metadata.distribution(name).metadata['Name']}=={Version(installed[name]).public}"
            for name in sorted(installed) if name not in skip]


def main(argv: list[str]) -> int:
    if argv[:1] == ["--freeze"]:
        installed, missing = requirement_tree(PROJECT, EXTRAS, installed_lookup)
        if missing or PROJECT not in installed:
            print(f"check_pinned: not installed: {', '.join(missing)}", file=sys.stderr)
            return 1
        print("\n".join(freeze(installed)))
        return 0
    path = Path(argv[0]) if argv else CONSTRAINTS
    pins = read_pins(path.read_text().splitlines())
    if installed_lookup(PROJECT) is None:
        print(f"check_pinned: {PROJECT} is not installed here", file=sys.stderr)
        return 1
    installed, missing = requirement_tree(PROJECT, EXTRAS, installed_lookup)
    problems = differences(installed, pins)
    problems += [f"{name} is required but not installed" for name in missing]
    if problems:
        print(f"check_pinned: the installed {PROJECT}[{','.join(EXTRAS)}] does not match "
              f"{path}:", file=sys.stderr)
        for line in problems:
            print(f"  {line}", file=sys.stderr)
        print("Install with `python -m pip install -c constraints.txt -e "
              f"\".[{','.join(EXTRAS)}]\"`, or, to move the pins to newer releases, run "
              "tools/refresh-constraints.", file=sys.stderr)
        return 1
    print(f"check_pinned: the {len(installed) - 1} packages that {PROJECT} needs are "
          f"installed at the versions {path.name} pins")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
