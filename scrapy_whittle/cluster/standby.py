"""A standby planner: the crawl's learned state kept warm in a process that is not the
planner, so that when the planner's lock falls to it, it hands out crawls at once instead of
restoring millions of sources first.

A process with ``WHITTLE_REDIS_STANDBY`` restores the state once, as a new planner would
(:meth:`RecrawlService.open_standby`: the sources registered, the policy built, every row
imported), then follows the planner's checkpoints: each one adds what it changed to the
stream ``Keys.changes`` in its crawl-wide transaction (:class:`~scrapy_whittle.cluster.state.
RedisStateStore`), and the standby reads the rows of those sources back
(:meth:`RedisStateStore.load_sources`) and applies them (:meth:`RecrawlService.follow`). When
it wins the lock, it follows the last checkpoints (the dead planner wrote nothing since) and
:meth:`RecrawlService.resume` does what an opening does as of now (the source list, the
book-keeping repaired, the retired sources' probes): the service then holds what a restore
from Redis would, without the restore's cost, which grows with the sources (about a minute
at ten million).

**Why it is the same state.** Its position is the checkpoint count (``checkpoint_seq`` in
``Keys.meta``) and the last entry of ``Keys.changes`` it applied, read together in one
transaction before the restore: a checkpoint committed during the restore is among the
entries after that one, and its sources are read again. A source is read again after every
checkpoint that wrote it, so once no planner writes, every source holds what Redis holds.
When the entries since its position are fewer than the checkpoints counted (the stream
trimmed past a standby that fell behind, or a planner that writes no changes), it restores
again from scratch. On a Redis Cluster a planner killed between a checkpoint's tags'
transactions and its crawl-wide one leaves tags a checkpoint ahead, and no entry in the
changes: a standby taking over reads those tags' sources again and takes their results for
learnt, as a restore does (``RedisStateStore.ahead_of``); a planner that restored instead
names them in its next checkpoint's changes, so that a standby following reads them again.

**Cost.** The process holds a second copy of the planner's state (about 1 KB a source):
one or two processes of a crawl keep a standby, not every worker. Following reads each
source a checkpoint wrote back from Redis (three reads inside one script call per 2,000
sources, per tag on a Redis Cluster: ``state.READ_SOURCES``) and costs the standby's CPU to
apply them. The WebSub subscriptions (few), the sitemap indexes' children and the indexes'
last listings are not followed: read at the take-over.

The calls are blocking (the ``redis`` client's synchronous API, numpy): the planner runs
them in a thread (:class:`~scrapy_whittle.cluster.planner.Planner`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import numpy as np

from scrapy_whittle.cluster import index_children
from scrapy_whittle.cluster.keys import Keys
from scrapy_whittle.cluster.state import RedisStateStore
from scrapy_whittle.cluster.websub import saved_rows
from scrapy_whittle.service.recrawl import RecrawlService
from scrapy_whittle.service.sources.registry import SourceSpec

logger = logging.getLogger(__name__)


class Standby:
    """The warm state of one process. ``make_service(store)``: a service as the planner
    makes it (settings, clock, stats) on ``store``."""

    def __init__(self, client, keys: Keys, make_service: Callable[[RedisStateStore],
                                                                  RecrawlService],
                 label: str = "redis", stats=None) -> None:
        self.client = client
        self.keys = keys
        self.make_service = make_service
        self.label = label
        self.stats = stats
        self.service: RecrawlService | None = None
        self.store: RedisStateStore | None = None
        #: the checkpoints applied: their count, the last entry of ``Keys.changes``
        self.seq = 0
        self.last_id = "0-0"
        self._behind_logged = False

    @property
    def ready(self) -> bool:
        return self.service is not None

    def _inc(self, key: str, count: int = 1) -> None:
        if self.stats is not None:
            self.stats.inc(f"cluster/standby/{key}", count)

    def _position(self) -> tuple[int, str]:
        pipe = self.client.pipeline(transaction=True)
        pipe.hget(self.keys.meta, "checkpoint_seq")
        pipe.xrevrange(self.keys.changes, count=1)
        seq, last = pipe.execute()
        return int(seq or 0), _id(last[0][0]) if last else "0-0"

    def open(self) -> bool:
        """Restore the whole state (blocking: seconds a million sources). False when
        Redis holds no crawl yet."""
        seq, last_id = self._position()
        store = RedisStateStore(self.client, self.keys, label=self.label)
        service = self.make_service(store)
        if not service.open_standby():
            return False
        self.service, self.store, self.seq, self.last_id = service, store, seq, last_id
        self._inc("restores")
        logger.info("standby planner: %d sources restored (checkpoint %d)",
                    len(service.sources), seq)
        return True

    def follow(self) -> int:
        """Open if not yet, else apply the checkpoints committed since the last call
        (blocking). Returns how many were applied."""
        if self.service is None:
            self.open()
            return 0
        pipe = self.client.pipeline(transaction=True)
        pipe.hget(self.keys.meta, "checkpoint_seq")
        pipe.xrange(self.keys.changes, min=f"({self.last_id}", max="+")
        seq, entries = pipe.execute()
        seq = int(seq or 0)
        if seq == self.seq:
            return 0
        if len(entries) != seq - self.seq:
            # (a planner of a version that writes no changes would repeat it: logged once)
            log = logger.debug if self._behind_logged else logger.warning
            log("standby planner: %d checkpoints since its last, %d of them in %s: it "
                "restores the state again", seq - self.seq, len(entries), self.keys.changes)
            self._behind_logged = True
            self._inc("behind")
            self.service = None
            self.open()
            return 0
        ids, moves, aliases, blocks, policy, hosts = [], [], [], set(), False, False
        for _, fields in entries:
            if isinstance(fields, list):     # (a Redis Cluster's transaction: raw pairs)
                fields = dict(zip(fields[::2], fields[1::2], strict=True))
            f = {_id(k): v for k, v in fields.items()}
            ids.append(np.frombuffer(f["ids"], dtype="<u4"))
            moves += [(int(sid), url) for sid, url in json.loads(f["moves"])]
            aliases += [(url, int(sid)) for url, sid in json.loads(f["aliases"])]
            blocks.update(json.loads(f["blocks"]))
            policy = policy or f["policy"] == b"1"
            hosts = hosts or f["hosts"] == b"1"
        changed = np.unique(np.concatenate(ids)).astype(np.int64)
        saved = self.store.load_sources(changed, len(self.service.sources), moves, aliases,
                                        sorted(blocks), policy, hosts)
        self.service.follow(saved)
        self.seq, self.last_id = seq, _id(entries[-1][0])
        self.store.seq = seq            # what its next checkpoint numbers from
        self._inc("checkpoints", len(entries))
        self._inc("sources", int(changed.shape[0]))
        return len(entries)

    def take(self, specs: list[SourceSpec] = (), listed: bool = True) -> RecrawlService:
        """The service, level with the last checkpoint, as :meth:`RecrawlService.open`
        would have made it now (this process holds the lock: no planner writes); the
        standby is empty after."""
        self.follow()
        if self.service is None:
            raise RuntimeError("the standby holds no state")
        service, store = self.service, self.store
        self.service, self.store = None, None
        # the tags a checkpoint cut short wrote ahead of the meta, read as a restore reads
        # them: their sources' records, their learnt results acknowledged only
        store.applied, store.ahead, store.ahead_moves = store.ahead_of(
            self.seq, len(service.sources))
        if store.ahead:
            service.follow(store.load_sources(
                np.asarray(store.ahead), len(service.sources), store.ahead_moves, [], [],
                True, False))       # (the policy's state: its rows are imported with it)
        if service.websub is not None:      # few: read as they are now, not followed
            service.websub.load(saved_rows(self.client, self.keys))
        # the sitemap indexes' children and last listings: read as they are now too, not
        # followed
        service.children.load(index_children.saved_rows(self.client, self.keys),
                              index_children.saved_indexes(self.client, self.keys))
        service.resume(list(specs), listed=listed)
        return service


def _id(value) -> str:
    return value.decode() if isinstance(value, bytes) else value
