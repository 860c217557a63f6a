"""The state store's contract (:class:`~scrapy_whittle.service.state.storage.StateStore`), one suite
run against each implementation (``backend``: SQLite, Redis on a real redis-server): a
service restored from a store continues as the one that checkpointed there would have, its
first checkpoint writes what changed since, not every source; and what a checkpoint writes
is what ``load`` reads back."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from scrapy_whittle.service.clock import SimulatedClock
from scrapy_whittle.service.sources.websub import Subscription
from scrapy_whittle.service.state.storage import NEW_COLUMNS, STATE_COLUMNS, Checkpoint, StateStore
from tests.service.test_recrawl import PoissonFeeds, make_service

N, BUDGET = 6, 2
RATES = [1 / 600, 1 / 1800, 1 / 300, 1 / 7200, 1 / 900, 1 / 60]
POLICIES = ["whittle", "thompson-whittle", "diurnal-whittle", "round_robin", "uniform",
            "nutch", "miniflux", "thompson", "lspe"]


def test_the_stores_implement_the_interface(backend):
    store = backend.open()
    assert isinstance(store, StateStore)
    assert store.load() is None                    # never written: a fresh crawl
    assert store.stories() == []


def crawl_epoch(service, clock, feeds) -> list[tuple]:
    """One epoch of crawls, each download instantaneous: most feeds answer with their entries
    (an ETag, a Last-Modified), some with a 304, late on some with a 500 and a Retry-After
    of two epochs (so the back-off ends where an epoch starts: a checkpoint between two
    epochs holds all a restore needs, not which crawls of an epoch were made already).
    Returns what was crawled and found."""
    done = []
    while (crawl := service.next_crawl()) is not None:
        sid, epoch = crawl.source, crawl.epoch
        if sid % 3 == 1 and epoch >= 6:
            service.crawl_failed(crawl, "http_500", "HTTP 500", retry_after=1200.0)
            found = []
        elif sid % 5 == 2 and epoch % 2:
            service.not_modified(crawl, etag=f'"e{sid}"')
            found = []
        else:
            found = [e.key for e in service.feed_fetched(
                crawl, feeds.entries(sid, clock.now()), etag=f'"v{sid}.{epoch}"',
                last_modified="Tue, 14 Nov 2023 22:13:20 GMT").entries]
        done.append((sid, epoch, found))
    clock.advance_to(service.wake_at)
    return done


@pytest.mark.parametrize("policy", POLICIES)
def test_a_restored_service_continues_as_the_uninterrupted_one(backend, policy):
    """Crawl, checkpoint, restore into a new service: the state is the checkpointed one, the
    first checkpoint after the restore writes what the uninterrupted service's writes (the
    sources crawled since, not every one restored), and both go on with the same crawls
    finding the same entries."""
    feeds = PoissonFeeds(RATES, seed=1)
    service, clock = make_service(n=N, policy=policy, budget=BUDGET, store=backend.open())
    for _ in range(12):
        crawl_epoch(service, clock, feeds)
    service.checkpoint()
    restored, _ = make_service(n=N, policy=policy, budget=BUDGET, clock=clock,
                               store=backend.open())
    ids = np.arange(N)
    if not backend.keeps_memories:       # as the cluster's workers find it in Redis
        restored.memory.import_keys(ids, service.memory.export_keys(ids))
    assert restored.policy.export_rows(ids).tobytes() == service.policy.export_rows(ids).tobytes()
    assert restored.memory.export_keys(ids) == service.memory.export_keys(ids)
    for name in ("last_crawl", "retry_at", "failures", "listed"):
        np.testing.assert_array_equal(getattr(restored.sources, name)[:N],
                                      getattr(service.sources, name)[:N], err_msg=name)
    for name in ("crawls", "errors", "new_items", "utility", "modified"):
        np.testing.assert_array_equal(getattr(restored.state, name)[:N],
                                      getattr(service.state, name)[:N], err_msg=name)
    assert restored.state.etag.get_many(ids) == service.state.etag.get_many(ids)
    assert sum(e is not None for e in restored.state.etag.get_many(ids)) > N // 2
    assert restored.origin == service.origin
    restored.clock = SimulatedClock(start=clock.now())
    plans: tuple[list, list] = ([], [])
    # six epochs, or as many as the feed readers' rules (which space their crawls by real
    # minutes and hours) take to crawl twelve times
    for epoch in range(500):
        if epoch >= 6 and len(plans[0]) >= 12:
            break
        for svc, plan in zip((service, restored), plans, strict=True):
            plan += crawl_epoch(svc, svc.clock, feeds)
        if epoch == 0:
            first, again = service.prepare_checkpoint(), restored.prepare_checkpoint()
            crawled = {sid for sid, *_ in plans[1]}
            assert again.n_new == 0
            assert again.n_changed == first.n_changed == len(crawled) <= BUDGET
    assert plans[0] == plans[1] and len(plans[0]) >= 12


#: the layout of a policy's per-source row: one double
LAYOUT = json.dumps(np.dtype([("n", "<f8")]).descr)


def _sources(ids, alive_at=None) -> list[tuple]:
    """Rows of STATE_COLUMNS + id for ``ids``."""
    state = {"last_crawl": 1000.0, "retry_at": 0.0, "failures": 0, "flags": 0, "etag": None,
             "modified": 0, "crawls": 1, "errors": 0, "new_items": 2, "utility": 2.0,
             "rate_per_hour": None, "half_life_hours": None, "mean_value": None,
             "entries": None, "alive_at": alive_at}
    return [(*({**state, "policy_row": np.float64(sid).tobytes(), "etag": f'"{sid}"'}[c]
               for c in STATE_COLUMNS), sid) for sid in ids]


def test_what_the_checkpoints_write_is_loaded_back(backend):
    store = backend.open()
    subscription = Subscription(source=0, topic="https://s0.example/feed",
                                hub="https://hub.example/", key="k0", secret="00",
                                state="active", requested_at=950.0, lease_seconds=3600.0,
                                expires_at=4550.0)
    if not backend.checkpoints_websub:
        backend.put_subscriptions([subscription.row()])
    new = [dict(zip(NEW_COLUMNS, (sid, f"https://s{sid}.example/feed", None, "news", 1.0,
                                  0.0), strict=True)) for sid in range(3)]
    store.write(Checkpoint(
        taken_at=1000.0, meta={"origin": 500.0},
        new_sources=lambda: [tuple(r.values()) for r in new], n_new=3,
        source_rows=lambda: _sources(range(3), alive_at=900.0), n_changed=3,
        policy=("whittle", LAYOUT, b"global 1"), blocks=[(1, "diurnal", b"block")],
        epochs=[(0, 3, 3.0, 6, 6.0, 0, 0)], epoch_errors=[(0, "timeout", 1)],
        hosts=[("a.example", 2.0, math.inf, 1)],
        sitemap_children=[(2, 0, 1, 900.0, 0)],
        stories=[(-5, 0, 1), (7, 2, 2), (9, 1, 3)], story_sources=[(7, 0)],
        sitemap_indexes=[(0, 1, 900.0, ("https://c.example/news.xml",))]))
    store.write(Checkpoint(
        taken_at=2000.0, meta={"origin": 500.0},
        source_rows=lambda: _sources([1], alive_at=950.0), n_changed=1,
        policy=("whittle", LAYOUT, b"global 2"),
        epochs=[(0, 1, 1.0, 0, 0.0, 1, 0), (1, 2, 2.0, 1, 1.0, 0, 1)],
        moves=[(1, "https://moved.example/feed")],
        aliases=[("https://s1.example/feed", 1)],
        hosts=[("a.example", 1.0, 4.0, 2), ("b.example", 3.0, math.inf, 1)],
        sitemap_children=[(2, 0, 2, 900.0, 1)],
        stories=[(-5, 1, 4)], stories_gone=[(9,)],
        websub=[subscription.row()]))
    store.close()
    store = backend.open()
    saved = store.load()
    assert saved.n_sources == 3
    assert (saved.meta["origin"], saved.meta["checkpoint_at"],
            int(saved.meta["checkpoint_seq"])) == (500.0, 2000.0, 2)
    cols = saved.sources
    assert list(cols["url"]) == ["https://s0.example/feed", "https://moved.example/feed",
                                 "https://s2.example/feed"]
    assert list(cols["category"]) == ["news"] * 3
    assert list(cols["etag"]) == ['"0"', '"1"', '"2"']
    assert [float(x) for x in cols["new_items"]] == [2.0] * 3
    assert [float(x) for x in cols["alive_at"]] == [900.0, 950.0, 900.0]
    rows = cols["policy_row"]        # bytes a row, or the rows as one structured array
    rows = rows.tobytes() if isinstance(rows, np.ndarray) else b"".join(rows)
    assert np.frombuffer(rows, "<f8").tolist() == [0.0, 1.0, 2.0]
    assert saved.policy == ("whittle", LAYOUT, b"global 2")
    assert saved.blocks == [(1, "diurnal", b"block")]
    assert [tuple(map(float, e)) for e in saved.epochs] == [(0, 4, 4, 6, 6, 1, 0),
                                                             (1, 2, 2, 1, 1, 0, 1)]
    assert saved.aliases == [("https://s1.example/feed", 1)]
    assert sorted(saved.hosts) == [("a.example", 1.0, 4.0, 2), ("b.example", 3.0, math.inf, 1)]
    assert saved.sitemap_children == [(2, 0, 2, 900.0, 1)]
    assert saved.sitemap_indexes == [(0, 1, 900.0, ("https://c.example/news.xml",))]
    assert saved.websub == [subscription.row()]
    assert sorted(store.stories()) == ([(-5, 1, 4), (7, 2, 2)] if backend.keeps_memories
                                       else [])
