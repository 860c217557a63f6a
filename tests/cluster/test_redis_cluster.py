"""Connecting to a Redis Cluster: the start-up check, a crawl's keys spread over slots by tag
(what one script or transaction touches in one), the round trips counted on the cluster
clients."""

from __future__ import annotations

import pytest
from redis.cluster import key_slot

from scrapy_whittle.cluster.connect import (
    async_client,
    key_prefix,
    reach,
    stream_keys,
    sync_client,
)
from scrapy_whittle.cluster.counting import RoundTrips, count_round_trips
from scrapy_whittle.cluster.keys import CHUNK, SPREAD, Keys
from scrapy_whittle.service.config import InvalidSetting
from tests.cluster.conftest import free_port
from tests.cluster.harness import on_asyncio


def _crawl_keys(keys: Keys) -> list[str]:
    return [getattr(keys, name) for name, value in vars(Keys).items()
            if isinstance(value, property)] + [keys.stories(i) for i in range(8)]


def _source_keys(keys: Keys, sid: int) -> list[str]:
    t = Keys.tag_of(sid)
    return [keys.rows(sid), keys.alive(sid), keys.etags(sid), keys.entries(sid),
            keys.urls(sid), keys.pending(t), keys.pending_since(t), keys.pending_next(t),
            keys.checkpoint(t)]


def test_on_a_cluster_a_crawls_keys_spread_over_slots_by_tag_and_on_one_redis_unchanged():
    cluster = Keys(key_prefix("whittle:news", "redis+cluster://h:7000"))
    assert cluster.meta == "{whittle:news}:meta"
    assert cluster.rows(0) == "{whittle:news:t0}:rows:0"
    assert cluster.rows(CHUNK * (SPREAD + 1)) == "{whittle:news:t1}:rows:129"
    # what one script or transaction touches is in one slot: the crawl-wide keys, and each
    # source's keys with its tag's pending batches and checkpoint record
    assert len({key_slot(k.encode()) for k in _crawl_keys(cluster)}) == 1
    for sid in (0, 63, 64, 511, 512, 10**6, 10**7 + 5):
        assert len({key_slot(k.encode()) for k in _source_keys(cluster, sid)}) == 1
    # the tags fall in every third of the slots (a three-node cluster's shards)
    slots = {key_slot(cluster.tag(t).encode()) for t in range(SPREAD)}
    assert len(slots) > SPREAD * 0.9 and {s * 3 // 16384 for s in slots} == {0, 1, 2}
    one = Keys(key_prefix("whittle:news", "redis://h:6379/0"))
    assert (one.meta, one.rows(0)) == ("whittle:news:meta", "whittle:news:t0:rows:0")
    # a prefix with its own hash tag is kept: every key in that tag's slot
    own = Keys(key_prefix("{tenant}:news", "redis+cluster://h:7000"))
    assert own.prefix == "{tenant}:news"
    assert len({key_slot(k.encode()) for k in _crawl_keys(own) + _source_keys(own, 10**6)}) == 1


def test_the_start_up_check_reaches_a_cluster_and_names_one_that_does_not_answer(
        redis_cluster):
    reach(redis_cluster.url, 5.0)
    url = f"redis+cluster://127.0.0.1:{free_port()}"
    with pytest.raises(InvalidSetting) as err:
        reach(url, 0.3)
    assert str(err.value).startswith(f"WHITTLE_REDIS_URL ({url!r}) did not answer")


def test_round_trips_are_counted_on_a_cluster_client(redis_cluster):
    counter = RoundTrips()
    client = count_round_trips(sync_client(redis_cluster.url), counter)
    try:
        for i in range(5):                   # keys on each of the shards (connections made)
            client.set(f"k{i}", i)
        assert counter.count >= 5
        before = counter.count
        for i in range(5):
            client.set(f"k{i}", i)
        assert counter.count - before == 5
    finally:
        client.close()


def test_the_keys_of_a_stream_read_are_what_follows_streams():
    assert stream_keys(("XREADGROUP", "GROUP", "g", "c", "COUNT", 5, "BLOCK", 500,
                        "STREAMS", "{a}:tasks", ">")) == ["{a}:tasks"]
    assert stream_keys(("xread", "streams", b"s1", b"s2", "0-0", "0-0")) == [b"s1", b"s2"]
    assert stream_keys(("GET", "k")) is None


@on_asyncio
async def test_a_stream_read_on_a_cluster_is_one_round_trip(redis_cluster):
    """Alone or in a pipeline: the cluster client finds the stream's slot without asking the
    server (``COMMAND GETKEYS``)."""
    counter = RoundTrips()
    client = count_round_trips(async_client(redis_cluster.url), counter)
    stream = "{whittle:news}:results"
    try:
        await client.xgroup_create(stream, "planner", id="0", mkstream=True)
        await client.xreadgroup("planner", "p", {stream: ">"}, count=10)   # connected
        before = counter.count
        await client.xadd(stream, {"a": 1})
        got = await client.xreadgroup("planner", "p", {stream: ">"}, count=10)
        pipe = client.pipeline(transaction=False)
        pipe.lpop("{whittle:news}:inbox", 10)
        pipe.xreadgroup("planner", "p", {stream: ">"}, count=10)
        await pipe.execute()
        assert counter.count - before == 3
        assert got[0][1][0][1] == {b"a": b"1"}
    finally:
        await client.aclose()
