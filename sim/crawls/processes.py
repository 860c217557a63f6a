"""Processes the benchmarks start: a free port, a ``redis-server`` (or a Redis Cluster) of
their own for one measurement, and the CPU a finished process used."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

from sim.crawls.planner_load import info_sum


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cluster_port() -> int:
    """A free port whose cluster bus port (+10000) exists and is free."""
    while True:
        port = free_port()
        if port + 10000 <= 65535:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port + 10000))
                except OSError:
                    continue
            return port


class RedisServer:
    """One redis-server, or (``nodes`` > 0) a Redis Cluster of ``nodes`` primaries."""

    def __init__(self, directory: Path, nodes: int = 0) -> None:
        import redis

        from scrapy_whittle.cluster.connect import sync_client

        ports = [_cluster_port() for _ in range(nodes)] if nodes else [free_port()]
        self.procs = []
        for port in ports:
            (directory / str(port)).mkdir()
            cluster = ["--cluster-enabled", "yes", "--cluster-config-file",
                       f"nodes-{port}.conf"] if nodes else []
            self.procs.append(subprocess.Popen(
                [shutil.which("redis-server") or "redis-server", "--port", str(port),
                 "--bind", "127.0.0.1", "--dir", str(directory / str(port)), "--save", "",
                 "--appendonly", "no", *cluster],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            with redis.Redis(port=port) as client:
                for _ in range(200):
                    try:
                        client.ping()
                        break
                    except redis.exceptions.ConnectionError:
                        time.sleep(0.05)
        if nodes:
            addresses = [f"127.0.0.1:{p}" for p in ports]
            subprocess.run([shutil.which("redis-cli") or "redis-cli", "--cluster", "create",
                            *addresses, "--cluster-replicas", "0", "--cluster-yes"],
                           check=True, stdout=subprocess.DEVNULL, timeout=60)
            for port in ports:
                with redis.Redis(port=port) as client:
                    while client.execute_command("CLUSTER INFO").get("cluster_state") != "ok":
                        time.sleep(0.05)
            self.url = "redis+cluster://" + ",".join(addresses)
        else:
            self.url = f"redis://127.0.0.1:{ports[0]}/0"
        self.client = sync_client(self.url)

    def opening(self, prefix: str) -> str:
        """How the keys of the crawls of ``prefix`` begin here (on a cluster, in the brace
        of their hash tag: ``{<prefix>:<spider>}:...``)."""
        return "{" + prefix if self.url.startswith("redis+cluster") else prefix

    def used_memory(self) -> int:
        """Redis's ``used_memory``, summed over a cluster's nodes."""
        return int(info_sum(self.client, "memory", "used_memory"))

    def stop(self) -> None:
        self.client.close()
        for proc in self.procs:
            proc.terminate()
            proc.wait(20)


def tree_cpu(pid: int) -> float:
    """User + system CPU seconds used so far by process ``pid`` and its descendants alive now
    (a crawler's parse workers) or already waited for (Linux ``/proc``); 0.0 for a process
    gone meanwhile."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        children = []
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                children += f.read().split()
    except OSError:
        return 0.0
    # utime, stime, cutime, cstime (children waited for): clock ticks
    ticks = sum(int(v) for v in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK") + sum(tree_cpu(int(c)) for c in children)


def reap(proc: subprocess.Popen, timeout: float) -> float:
    """Wait for ``proc`` (killed after ``timeout`` s); returns its user + system CPU seconds."""
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime
