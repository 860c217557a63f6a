"""The benchmarks' CPU accounting of a process tree: a crawler's parse workers count."""

from __future__ import annotations

import subprocess
import sys

from sim.crawls.processes import reap, tree_cpu

# a parent whose child spends 0.3 s of CPU, says so, and waits for the parent's stdin to close
TREE = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", '''
import sys, time
t = time.process_time()
while time.process_time() - t < 0.3:
    pass
print("spent", flush=True)
sys.stdin.read()
'''], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
print(child.stdout.readline().strip(), flush=True)
sys.stdin.read()
child.stdin.close()
child.wait()
"""


def test_a_process_trees_cpu_counts_its_live_children_and_those_reaped():
    parent = subprocess.Popen([sys.executable, "-c", TREE], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "spent"
        alive = tree_cpu(parent.pid)
        assert alive >= 0.3                   # the child's, alive: read from its /proc
    finally:
        parent.stdin.close()
    assert reap(parent, 30) >= 0.3            # the child waited for: in the parent's usage
    parent.stdout.close()
    assert tree_cpu(parent.pid) == 0.0        # gone
