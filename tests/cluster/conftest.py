"""A real redis-server for the cluster tests, started on a free port in a temporary
directory (append-only file on, so that a restart keeps the data), stopped at the end; and a
real three-node Redis Cluster of them (``redis_cluster``)."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import pytest
import redis
import redis.cluster

from scrapy_whittle.cluster.connect import key_prefix
from scrapy_whittle.cluster.keys import Keys
from scrapy_whittle.cluster.state import RedisStateStore
from tests.waiting import wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_cluster_port() -> int:
    """A free port whose cluster bus port (the port + 10000) is free too, and exists."""
    while True:
        port = free_port()
        if port + 10000 > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


class RedisServer:
    def __init__(self, directory: Path, port: int | None = None,
                 extra: list[str] = ()) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.extra = list(extra)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed (.ci/run installs it with "
                               "apt-get install redis-server)")
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory),
             "--appendonly", "yes", "--appendfsync", "always", "--save", "",
             "--protected-mode", "no", *self.extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with redis.Redis(port=self.port) as client:
            def answers() -> bool:
                try:
                    return client.ping()
                except redis.exceptions.ConnectionError:
                    return False

            wait_for(answers, timeout=20, alive=self.proc,
                     what=f"redis-server to answer on port {self.port}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(20)
        self.proc = None

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port)

    def keys(self, prefix: str) -> Keys:
        """The key names of the crawl ``prefix`` here."""
        return Keys(key_prefix(prefix, self.url))


def source_urls(client, keys: Keys) -> list[str]:
    """The URLs of the crawl's sources in Redis (a chunk's list after another)."""
    return RedisStateStore(client, keys).urls()


@pytest.fixture
def redis_server(tmp_path):
    (tmp_path / "redis").mkdir()
    server = RedisServer(tmp_path / "redis")
    yield server
    server.stop()


class RedisClusterServers:
    """A real three-node Redis Cluster (no replicas: each node serves a third of the slots),
    each node on a free port in its own directory with the append-only file on (fsync
    always), so that a node restarted keeps its data, and, from its ``nodes-<port>.conf``,
    its slots and its place in the cluster. ``url`` is the crawl's ``redis+cluster://``."""

    def __init__(self, directory: Path, nodes: int = 3) -> None:
        self.servers: list[RedisServer] = []
        for _ in range(nodes):
            port = free_cluster_port()
            (directory / str(port)).mkdir()
            self.servers.append(RedisServer(directory / str(port), port=port,
                                            extra=["--cluster-enabled", "yes",
                                                   "--cluster-config-file",
                                                   f"nodes-{port}.conf",
                                                   "--cluster-node-timeout", "2000"]))
        addresses = [f"127.0.0.1:{s.port}" for s in self.servers]
        subprocess.run([shutil.which("redis-cli"), "--cluster", "create", *addresses,
                        "--cluster-replicas", "0", "--cluster-yes"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        self.url = "redis+cluster://" + ",".join(addresses)
        self.wait_ok()

    def wait_ok(self) -> None:
        """Until every node says ``cluster_state:ok`` (all slots served)."""
        for server in self.servers:
            with server.client() as client:
                def ok(client=client) -> bool:
                    try:
                        return client.execute_command("CLUSTER INFO").get(
                            "cluster_state") == "ok"
                    except redis.exceptions.ConnectionError:
                        return False

                wait_for(ok, timeout=30, alive=server.proc,
                         what=f"the cluster to be ok on port {server.port}")

    def client(self) -> redis.cluster.RedisCluster:
        return redis.cluster.RedisCluster(host="127.0.0.1", port=self.servers[0].port)

    def keys(self, prefix: str) -> Keys:
        """The key names of the crawl ``prefix`` here (hash-tagged)."""
        return Keys(key_prefix(prefix, self.url))

    def shard_of(self, key: str) -> RedisServer:
        """The node serving ``key``'s slot."""
        with self.client() as client:
            node = client.get_node_from_key(key)
        return next(s for s in self.servers if s.port == node.port)

    def restart(self, server: RedisServer) -> None:
        """Stop one shard (SIGTERM: its append-only file is complete) and start it again with
        its data and slots; returns once the cluster is ok again."""
        server.stop()
        server.start()
        self.wait_ok()

    def empty(self) -> None:
        """As a cluster just created: every node without keys, Lua scripts or command
        statistics, all slots served."""
        self.wait_ok()
        for server in self.servers:
            with server.client() as client:
                client.flushall()
                client.script_flush()
                client.config_resetstat()

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


@pytest.fixture(scope="session")
def shared_redis_cluster(tmp_path_factory):
    """One Redis Cluster for the session: creating one takes seconds (the nodes meet, the
    slots are assigned), emptying it a few milliseconds."""
    cluster = RedisClusterServers(tmp_path_factory.mktemp("redis-cluster"))
    yield cluster
    cluster.stop()


@pytest.fixture
def redis_cluster(shared_redis_cluster):
    """A three-node Redis Cluster, empty, for a test that does not stop its nodes (one that
    does takes ``own_redis_cluster``)."""
    shared_redis_cluster.empty()
    yield shared_redis_cluster
    # a test that stopped a node anyway would leave the next ones a broken cluster
    shared_redis_cluster.wait_ok()


@pytest.fixture
def own_redis_cluster(tmp_path):
    """A three-node Redis Cluster of the test's own, whose nodes it may stop and restart."""
    (tmp_path / "redis-cluster").mkdir()
    cluster = RedisClusterServers(tmp_path / "redis-cluster")
    yield cluster
    cluster.stop()


@pytest.fixture(params=["one-redis", "redis-cluster"])
def any_redis(request, tmp_path):
    """The same check on one redis-server and on a three-node Redis Cluster (``url``,
    ``client()``: of either)."""
    if request.param == "one-redis":
        yield request.getfixturevalue("redis_server")
    else:
        yield request.getfixturevalue("redis_cluster")
