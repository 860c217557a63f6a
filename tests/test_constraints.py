"""tools/check_pinned.py, which .ci/run calls after the install: the installed requirement
tree must be what constraints.txt pins, so that a fresh machine installs what passed."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("check_pinned", ROOT / "tools" / "check_pinned.py")
check_pinned = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_pinned)

# a Linux CPython 3.11, whatever runs the tests: the markers below must not depend on it
ENV = {"python_version": "3.11", "python_full_version": "3.11.7", "sys_platform": "linux",
       "platform_system": "Linux", "os_name": "posix", "platform_machine": "x86_64",
       "platform_python_implementation": "CPython", "implementation_name": "cpython",
       "implementation_version": "3.11.7", "platform_release": "", "platform_version": "",
       "extra": ""}

GRAPH = {
    "App": ("1.0", ["Lib_One>=1", 'torch; extra == "dqn"', 'redis[hiredis]; extra == "cluster"',
                    'pytest; extra == "test"', 'oldpy; python_version < "3.10"']),
    "lib.one": ("2.0", ["Shared"]),
    "torch": ("2.13.0+cpu", ["setuptools>=77", "shared", 'numpy; extra == "opt"']),
    "redis": ("8.1.0", ['hiredis>=3; extra == "hiredis"', 'cryptography; extra == "ocsp"']),
    "hiredis": ("3.5.0", []),
    "shared": ("1.1", []),
    "setuptools": ("84.2.1", ['wheel; extra == "core"']),
    "pytest": ("9.2.0", []),
    "numpy": ("2.4.6", []),
    "cryptography": ("50.0.2", []),
    "oldpy": ("1.0", []),
    "unrelated": ("0.1", []),   # installed, but nothing in the tree needs it
}


def lookup(name):
    for key, value in GRAPH.items():
        if check_pinned.canonical(key) == check_pinned.canonical(name):
            return value
    return None


def test_names_are_compared_as_pep_503_normalises_them():
    assert check_pinned.canonical("zope.interface") == "zope-interface"
    assert check_pinned.canonical("Typing__Extensions") == "typing-extensions"
    assert check_pinned.canonical("a-_.b") == "a-b"


def test_the_tree_follows_the_extras_asked_for_and_the_markers_that_hold():
    tree, missing = check_pinned.requirement_tree("app", ["dqn", "cluster"], lookup, ENV)
    assert tree == {"app": "1.0", "lib-one": "2.0", "shared": "1.1", "torch": "2.13.0+cpu",
                    "setuptools": "84.2.1", "redis": "8.1.0", "hiredis": "3.5.0"}
    assert missing == []
    # no extras: only the unconditional requirements
    tree, _ = check_pinned.requirement_tree("app", [], lookup, ENV)
    assert set(tree) == {"app", "lib-one", "shared"}
    # a required package that is not installed is reported, not skipped
    tree, missing = check_pinned.requirement_tree(
        "app", [], lambda n: None if n == "Shared" else lookup(n), ENV)
    assert missing == ["shared"] and "shared" not in tree


def test_a_package_met_again_with_more_extras_is_expanded_again():
    graph = {"root": ("1", ["redis", "middle"]), "middle": ("1", ["redis[hiredis]"]),
             "redis": GRAPH["redis"], "hiredis": GRAPH["hiredis"]}
    tree, _ = check_pinned.requirement_tree("root", [], graph.get, ENV)
    assert "hiredis" in tree


def test_differences_name_unpinned_and_mispinned_packages():
    tree, _ = check_pinned.requirement_tree("app", ["dqn", "cluster", "test"], lookup, ENV)
    pins = check_pinned.read_pins([
        "# a comment", "", "Lib.One==2.0", "shared==1.1  # trailing comment", "torch==2.13.0",
        "setuptools==84.2.1", "redis==8.0.0", "pytest==9.2.0"])
    assert check_pinned.differences(tree, pins, ignore=["App"]) == [
        "hiredis 3.5.0 is installed but not pinned",
        "redis 8.1.0 is installed but pinned at 8.0.0"]
    # all pinned: nothing to say (torch's +cpu meets torch==2.13.0)
    pins["hiredis"], pins["redis"] = "3.5.0", "8.1.0"
    assert check_pinned.differences(tree, pins, ignore=["App"]) == []
    # the project itself is never pinned; without ignoring it, it would be reported
    assert check_pinned.differences(tree, pins, ignore=[]) == [
        "app 1.0 is installed but not pinned"]


def test_the_installer_s_tools_count_only_where_pinned():
    assert check_pinned.differences({"setuptools": "84.2.1", "pip": "23.2.1"}, {}) == []
    assert check_pinned.differences({"setuptools": "84.2.1"}, {"setuptools": "80.0"}) == [
        "setuptools 84.2.1 is installed but pinned at 80.0"]


def test_versions_compare_as_pep_440_with_the_local_label_dropped_only_from_the_installed():
    same = check_pinned.same_version
    assert same("2.13.0+cpu", "2.13.0") and same("2.0", "2.0.0") and same("1.0", "1.0")
    assert not same("2.13.1", "2.13.0") and not same("2.13.0+cpu", "2.13.0+cu128")


def test_a_pin_that_is_not_name_equals_version_is_an_error():
    for line in ["numpy>=2", "numpy", "numpy==2.0; python_version<'3.12'", "-e ."]:
        with pytest.raises(ValueError, match="not name==version"):
            check_pinned.read_pins([line])
    with pytest.raises(ValueError, match="pinned twice"):
        check_pinned.read_pins(["Scrapy==2.19.0", "scrapy==2.19.0"])


def test_the_real_constraints_pin_every_package_of_the_installed_tree():
    # what .ci/run checks, versions included, after its install; here the names only, so that
    # a dependency added to pyproject.toml without a pin fails the suite wherever it runs
    pins = check_pinned.read_pins((ROOT / "constraints.txt").read_text().splitlines())
    tree, missing = check_pinned.requirement_tree(
        check_pinned.PROJECT, check_pinned.EXTRAS, check_pinned.installed_lookup)
    assert missing == []
    assert "torch" in tree and "scrapy" in tree      # the walk reached the extras and deps
    unpinned = set(tree) - set(pins) - {"scrapy-whittle"} - check_pinned.TOOLS
    assert unpinned == set()
    assert "scrapy-whittle" not in pins and "scrapy-whittle" in tree


def test_the_command_fails_with_a_clear_message_on_a_difference(tmp_path):
    pins = (ROOT / "constraints.txt").read_text().splitlines()
    bad = tmp_path / "constraints.txt"
    bad.write_text("\n".join(line for line in pins if not line.startswith("numpy==")) + "\n")
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "check_pinned.py"), str(bad)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 1
    assert "numpy" in result.stderr and "is installed but not pinned" in result.stderr
    assert "tools/refresh-constraints" in result.stderr
