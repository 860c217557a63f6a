"""Each implementation of the state store
(:class:`~scrapy_whittle.service.state.storage.StateStore`), for the one suite that checks their
contract: SQLite in the test's directory, Redis on a real redis-server (one for the session, emptied
before each test)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from scrapy_whittle.cluster import websub
from scrapy_whittle.cluster.keys import Keys
from scrapy_whittle.cluster.state import RedisStateStore
from scrapy_whittle.service.sources.websub import Subscription
from scrapy_whittle.service.state.storage import StateStore
from scrapy_whittle.service.state.store import FILE_NAME, SqliteStateStore
from tests.cluster.conftest import RedisServer


@dataclass
class Backend:
    """One implementation: ``open()`` a store on the crawl's place (as a new process would)."""

    name: str
    open: Callable[[], StateStore]
    #: whether the store keeps the entry and story memories (a cluster keeps them in Redis,
    #: where its workers look them up: :mod:`scrapy_whittle.cluster.entries`,
    #: :mod:`scrapy_whittle.cluster.stories`)
    keeps_memories: bool
    #: whether the checkpoints write the WebSub subscriptions (``Checkpoint.websub``); else
    #: ``put_subscriptions(rows)`` stores them, as that side writes each when it changes
    checkpoints_websub: bool = True
    put_subscriptions: Callable[[list[tuple]], None] | None = None


@pytest.fixture(scope="session")
def session_redis(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "redis"])
def backend(request, tmp_path):
    if request.param == "sqlite":
        yield Backend("sqlite", lambda: SqliteStateStore(tmp_path / FILE_NAME),
                      keeps_memories=True)
        return
    server = request.getfixturevalue("session_redis")
    with server.client() as client:
        client.flushall()
        keys = Keys("st")

        def put_subscriptions(rows: list[tuple]) -> None:
            """A cluster's planner writes each subscription to Redis as it changes
            (:class:`~scrapy_whittle.cluster.websub.PlannerWebSub`), with its source's URL
            and weight."""
            client.hset(keys.websub, mapping={
                row[3]: websub.encode(Subscription.from_row(row), (f"https://s{row[0]}/", 1.0))
                for row in rows})

        yield Backend("redis", lambda: RedisStateStore(client, keys), keeps_memories=False,
                      checkpoints_websub=False, put_subscriptions=put_subscriptions)
