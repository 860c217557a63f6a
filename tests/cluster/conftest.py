"""A real redis-server for the cluster tests, started on a free port in a temporary
directory (append-only file on, so that a restart keeps the data), stopped at the end."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import pytest
import redis

from tests.waiting import wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
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
             "--protected-mode", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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


@pytest.fixture
def redis_server(tmp_path):
    (tmp_path / "redis").mkdir()
    server = RedisServer(tmp_path / "redis")
    yield server
    server.stop()
