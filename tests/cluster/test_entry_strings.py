"""The entry memory of a cluster packs the memories of 64 sources in one string: fetches of
neighbouring sources in any order, growing and shrinking their memories, tell the same new
entries as one process's ``EntryMemory`` does, each source's memory untouched by the others'."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest_twisted
from twisted.internet.defer import Deferred

from scrapy_whittle.cluster.entries import packed_hashes
from scrapy_whittle.cluster.keys import BUCKET
from scrapy_whittle.cluster.node import ClusterNode
from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.service.clock import SystemClock
from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.entry_memory import EntryMemory
from scrapy_whittle.service.types import DictStats
from tests.cluster.conftest import RedisServer

MAXN = 12
SOURCES = [0, 1, 5, BUCKET - 1, BUCKET, 3 * BUCKET + 2]   # four in one string, two beyond


def _entry(key: str) -> FeedEntry:
    return FeedEntry(key=key, title=None, link=None, published=None, engagement=None)


@pytest_twisted.ensureDeferred
async def test_neighbours_in_one_string_tell_new_entries_as_one_process_does(tmp_path):
    (tmp_path / "redis").mkdir()
    server = RedisServer(tmp_path / "redis")
    try:
        await Deferred.fromFuture(asyncio.ensure_future(_compare(server.url)))
    finally:
        server.stop()


async def _compare(url: str) -> None:
    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": 1, "WHITTLE_DEDUP": "entry",
                                          "WHITTLE_MAX_ENTRIES_PER_SOURCE": MAXN})
    node = ClusterNode(config, redis_url=url, prefix="test", specs=[], stats=DictStats(),
                       clock=SystemClock())
    local = EntryMemory(max(SOURCES) + 1, max_per_source=MAXN)
    rng = np.random.default_rng(5)
    told = 0
    try:
        for step in range(300):
            sid = int(rng.choice(SOURCES))
            # a window of 1..16 entries over a feed's numbered entries, sliding and jumping
            # (more than the memory holds at times: shrinking and growing records)
            top = int(rng.integers(0, 40))
            shown = [_entry(f"s{sid}-e{j}") for j in range(top, top - int(rng.integers(1, 17)),
                                                           -1)]
            shown += [shown[0]] if step % 7 == 0 else []        # a key twice in the feed
            expected = [e.key for e in local.new_entries(sid, shown)]
            distinct, packed = packed_hashes(shown)
            keys, args = node.entry_call(sid, packed, [])
            _had, flags, _batch, _grown = await node._entries(keys=keys, args=args)
            flags = flags.decode()
            got = [e.key for e, f in zip(distinct, flags, strict=False) if f == "1"]
            assert got == expected, (step, sid)
            told += len(got)
        assert told > 100
        # each source's remembered hashes are the one process's
        for sid in SOURCES:
            blob = await node.redis.get(node.keys.entries(sid))
            lengths = np.frombuffer(blob[:4 * BUCKET], "<u4")
            at = 4 * BUCKET + int(lengths[:sid % BUCKET].sum())
            record = blob[at:at + int(lengths[sid % BUCKET])]
            remembered = np.frombuffer(record[4:], "<u8")
            assert sorted(remembered) == sorted(local.keys(sid)), sid
    finally:
        await node.redis.aclose()
        node.sync_redis.close()
