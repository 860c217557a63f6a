"""Connecting to a Redis Cluster: the start-up check, every key of a crawl in one slot (its
scripts and transactions need it), the round trips counted on the cluster clients."""

from __future__ import annotations

import pytest
from redis.cluster import key_slot

from scrapy_whittle.cluster.connect import key_prefix, reach, sync_client
from scrapy_whittle.cluster.counting import RoundTrips, count_round_trips
from scrapy_whittle.cluster.keys import Keys
from scrapy_whittle.service.config import InvalidSetting
from tests.cluster.conftest import free_port


def _all_keys(keys: Keys) -> list[str]:
    names = [getattr(keys, name) for name, value in vars(Keys).items()
             if isinstance(value, property)]
    for sid in (0, 63, 64, 511, 512, 10**6):
        names += [keys.rows(sid), keys.alive(sid), keys.etags(sid), keys.entries(sid)]
    return names + [keys.stories(i) for i in range(8)]


def test_on_a_cluster_every_key_of_a_crawl_is_in_one_slot_and_on_one_redis_unchanged():
    cluster = Keys(key_prefix("whittle:news", "redis+cluster://h:7000"))
    assert cluster.rows(0) == "{whittle:news}:rows:0"
    assert len({key_slot(k.encode()) for k in _all_keys(cluster)}) == 1
    assert Keys(key_prefix("whittle:news", "redis://h:6379/0")).rows(0) == "whittle:news:rows:0"
    # a prefix with its own hash tag is kept
    assert key_prefix("{tenant}:news", "redis+cluster://h:7000") == "{tenant}:news"


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
