"""Write commands run as one atomic step by a script (:mod:`scrapy_whittle.cluster.writes`),
on one Redis and on a three-node Redis Cluster: what a transaction did, in one round trip."""

from __future__ import annotations

from scrapy_whittle.cluster.connect import async_client
from scrapy_whittle.cluster.counting import RoundTrips, count_round_trips
from scrapy_whittle.cluster.writes import MAX_ARGS, RUN, Writes
from tests.cluster.harness import on_asyncio


@on_asyncio
async def test_writes_run_in_turn_in_one_round_trip(any_redis):
    counter = RoundTrips()
    client = count_round_trips(async_client(any_redis.url), counter)
    keys = any_redis.keys("test")
    script = client.register_script(RUN)
    try:
        await client.xgroup_create(keys.tasks, "workers", id="0", mkstream=True)
        await client.xadd(keys.tasks, {"sid": 1})
        (task_id, _), = (await client.xreadgroup("workers", "w", {keys.tasks: ">"}))[0][1]
        await client.hset(keys.aliases, mapping={1: "a", 2: "b", 3: "c"})
        await Writes().add("PING", keys.meta).run(script)     # the script loaded
        before = counter.count
        many = {n: f"v{n}" for n in range(MAX_ARGS)}          # split into two HSETs
        await (Writes().xadd(keys.results, {"cid": "c1", "new": 3})
               .add("XACK", keys.tasks, "workers", task_id).add("XDEL", keys.tasks, task_id)
               .hset(keys.in_flight, many).add("HINCRBYFLOAT", keys.spent, 7, 1.5)
               .add("HINCRBY", keys.totals, "crawls", 2)
               .variadic("HDEL", keys.aliases, [1, 3]).run(script))
        assert counter.count - before == 1
        (_, fields), = await client.xrange(keys.results)
        assert fields == {b"cid": b"c1", b"new": b"3"}
        assert await client.xlen(keys.tasks) == 0
        assert (await client.xpending(keys.tasks, "workers"))["pending"] == 0
        assert await client.hlen(keys.in_flight) == MAX_ARGS
        assert await client.hget(keys.in_flight, MAX_ARGS - 1) == f"v{MAX_ARGS - 1}".encode()
        assert float(await client.hget(keys.spent, 7)) == 1.5
        assert await client.hget(keys.totals, "crawls") == b"2"
        assert await client.hgetall(keys.aliases) == {b"2": b"b"}
    finally:
        await client.aclose()


@on_asyncio
async def test_a_failing_command_stops_the_writes_after_it(redis_server):
    """A script stops at an error (a transaction would run the other commands): the commands
    before it ran, none after."""
    client = async_client(redis_server.url)
    keys = redis_server.keys("test")
    script = client.register_script(RUN)
    try:
        await client.set(keys.meta, "a string")
        writes = (Writes().add("HSET", keys.totals, "a", 1).add("HSET", keys.meta, "b", 2)
                  .add("HSET", keys.totals, "c", 3))
        try:
            await writes.run(script)
        except Exception as exc:                        # WRONGTYPE, from the script
            assert "WRONGTYPE" in str(exc)
        else:
            raise AssertionError("the script did not fail")
        assert await client.hgetall(keys.totals) == {b"a": b"1"}
    finally:
        await client.aclose()
