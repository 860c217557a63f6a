"""The entry memory of a cluster packs the memories of 64 sources in one string: fetches (and
WebSub deliveries) of neighbouring sources in any order, growing and shrinking their memories,
tell the same new entries as one process's ``EntryMemory`` does, each source's memory untouched
by the others'."""

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
from scrapy_whittle.service.memory.entry_memory import EntryMemory
from scrapy_whittle.service.types import DictStats
from tests.cluster.conftest import RedisServer
from tests.cluster.harness import on_asyncio

MAXN = 12
SOURCES = [0, 1, 5, BUCKET - 1, BUCKET, 3 * BUCKET + 2]   # four in one string, two beyond


def _entry(key: str) -> FeedEntry:
    return FeedEntry(key=key, title=None, link=None, published=None, engagement=None)


async def record_of(node: ClusterNode, sid: int) -> tuple[int, int, list[int]]:
    """The capacity, the room lent and the hashes (oldest first) of ``sid``'s record, read
    from its bucket's string as :data:`~scrapy_whittle.cluster.entries.ENTRIES` lays it out
    (a record of 8 + 8k bytes has a second word: the room lent)."""
    blob = await node.redis.get(node.keys.entries(sid)) or b""
    if not blob:
        return 0, 0, []
    lengths = np.frombuffer(blob[:4 * BUCKET], "<u4")
    at = 4 * BUCKET + int(lengths[:sid % BUCKET].sum())
    record = blob[at:at + int(lengths[sid % BUCKET])]
    if not record:
        return 0, 0, []
    words = 2 if len(record) % 8 == 0 else 1
    cap, lent = (*np.frombuffer(record[:4 * words], "<u4").tolist(), 0)[:2]
    return cap, lent, np.frombuffer(record[4 * words:], "<u8").tolist()


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


@on_asyncio
async def test_neighbours_tell_fetches_and_pushes_as_one_process_does(any_redis):
    """Fetches and WebSub deliveries (some of the new entries only, some of a window) mixed:
    the same new entries, and after each step the same record (capacity, room lent, hashes
    oldest first) as one process's ``EntryMemory``; the neighbours' records intact."""
    maxn = 30              # above the room windows of up to 16 take: pushes lend room
    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": 1, "WHITTLE_DEDUP": "entry",
                                          "WHITTLE_MAX_ENTRIES_PER_SOURCE": maxn})
    node = ClusterNode(config, redis_url=any_redis.url, prefix="test", specs=[],
                       stats=DictStats(), clock=SystemClock())
    local = EntryMemory(max(SOURCES) + 1, max_per_source=maxn)
    rng = np.random.default_rng(11)
    top = dict.fromkeys(SOURCES, 0)         # each feed's newest entry so far
    lent_steps = given_back = told = 0
    try:
        for step in range(400):
            sid = int(rng.choice(SOURCES))
            push = rng.random() < 0.4
            if push and rng.random() < 0.7:     # only the new entries (PubSubHubbub 0.3)
                k = int(rng.integers(1, 9))
                shown = [_entry(f"s{sid}-e{j}") for j in range(top[sid] + k, top[sid], -1)]
                top[sid] += k
            else:                               # a window, sliding, jumping, oldest first
                top[sid] = max(top[sid], int(rng.integers(0, 60)))
                last = top[sid] - int(rng.integers(0, 8))
                shown = [_entry(f"s{sid}-e{j}")
                         for j in range(last, last - int(rng.integers(1, 17)), -1)]
                shown = shown[::-1] if rng.random() < 0.3 else shown
            shown += [shown[0]] if step % 7 == 0 else []        # a key twice in the feed
            lent_before, cap_before = local.lent.get(sid, 0), int(local.cap[sid])
            found = local.pushed(sid, shown) if push else local.new_entries(sid, shown)
            expected = [e.key for e in found]
            distinct, packed = packed_hashes(shown)
            keys, args = node.entry_call(sid, packed, [], push=push)
            _had, flags, _batch, _grown = await node._entries(keys=keys, args=args)
            flags = flags.decode()
            got = [e.key for e, f in zip(distinct, flags, strict=False) if f == "1"]
            assert got == expected, (step, sid, push)
            told += len(got)
            lent = local.lent.get(sid, 0)
            assert await record_of(node, sid) == (int(local.cap[sid]), lent,
                                                  local.keys(sid).tolist()), (step, sid)
            lent_steps += lent > lent_before
            given_back += int(local.cap[sid]) < cap_before
        assert told > 100 and lent_steps > 20 and given_back > 10
        for sid in SOURCES:                      # each record the one process's
            assert await record_of(node, sid) == (int(local.cap[sid]), local.lent.get(sid, 0),
                                                  local.keys(sid).tolist()), sid
    finally:
        await node.redis.aclose()
        node.sync_redis.close()
