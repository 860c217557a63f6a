"""What the service keeps of a crawl, declared once; where it keeps it is the store's business.

Five storage concepts exist on both sides of the package, one process (SQLite in ``JOBDIR``,
the memories in the process) and a cluster (Redis). What each one's contract is, and where
the two sides genuinely differ:

* **The state store** (:class:`StateStore`, below): the crawl's learned state, written a
  checkpoint at a time (:class:`Checkpoint`: what changed since the previous one) and read
  back whole when a crawl resumes (:class:`SavedState`). One process's
  :class:`~scrapy_whittle.service.state.store.SqliteStateStore` (``JOBDIR/whittle.sqlite``) and a
  cluster planner's :class:`~scrapy_whittle.cluster.state.RedisStateStore` implement it; the
  re-crawl service (:mod:`scrapy_whittle.service.state.persistence`) depends on nothing else.
  The contract: ``load()`` on a store never written is None; after ``write(cp)`` it returns
  what the checkpoints wrote: the sources (their registration, book-keeping, validators,
  counters, the policy's per-source rows and last sign of life), the moved sources' URLs
  and aliases, the per-source blocks, the policy's global state, the epochs' aggregates
  (added up across checkpoints), the throttled hosts, the meta (with ``checkpoint_at`` and
  ``checkpoint_seq``, one more each checkpoint), the WebSub subscriptions, the child
  sitemaps and each sitemap index's last listing; so that a service restored from it makes
  the choices the one that wrote it would have made. ``write`` is all or nothing on one
  SQLite file or one Redis (a Redis Cluster: tag by tag, then the crawl-wide part, see
  :mod:`scrapy_whittle.cluster.state`). Where the sides differ: SQLite also keeps what a
  person reads (titles, the readable estimates, each epoch's measures and the publication
  times, for ``whittle-report``), the entry memory's hashes (``entries``) and the story
  memory (``stories()``); a cluster keeps the latter two in Redis where its workers look
  them up (below), so the Redis store reads ``entries`` back as None and ``stories()`` as
  none, and ignores ``Checkpoint.websub`` (the planner writes each subscription as it
  changes, below). A Redis store's ``write`` takes the planner's acknowledgements too, and
  it reads part of the state for a standby (``load_sources``): the planner's, not the
  service's, concern.
* **The entry memory**: which entries of a source's feed were seen, by the XXH3-64 hashes
  of their keys, oldest first, the capacity following the feed plus a slack; a fetch's
  entries not seen are new and remembered, a WebSub delivery's grow the memory until the
  next fetch. One process: :class:`~scrapy_whittle.service.memory.entry_memory.EntryMemory`, in
  memory, checkpointed through the store (``entries``). A cluster:
  :mod:`scrapy_whittle.cluster.entries`, a Lua script a worker runs per fetch, which tells
  the new entries and stores them as a pending batch in one atomic step (two workers never
  both take an entry for new). The same identity and rule, no common Python shape: the
  cluster's is one step of a script with the delivery journal, never a call the service
  makes, so no interface is declared for it (``tests/cluster/test_entry_strings.py`` checks
  the script against ``EntryMemory`` fetch by fetch and push by push).
* **The story memory** (``WHITTLE_DEDUP = "link"``): which stories the crawl has, across
  sources, by the hashes of their story keys, least recently seen forgotten first beyond a
  bound that follows the entry memory's; an entry new to its feed whose story is known is a
  repeat (no item, no reward). One process:
  :class:`~scrapy_whittle.service.memory.story_memory.StoryMemory`, in memory, checkpointed
  through the store (``Checkpoint.stories``, ``StateStore.stories()``). A cluster:
  :mod:`scrapy_whittle.cluster.stories`, part of the worker's report script, so that of two
  workers fetching two feeds that list one story one emits it. As with the entry memory,
  the same identity and bound, and no call of the service to declare
  (``tests/cluster/test_stories.py`` checks the nodes against one process's service).
* **The WebSub subscriptions**: one implementation of the subscriber
  (:class:`~scrapy_whittle.service.sources.websub.Subscriptions`, the service's, also the cluster
  planner's); what is stored is their rows (``SavedState.websub``), restored by ``load``.
  One process writes them with the checkpoint (``Checkpoint.websub``, when one changed); a
  cluster's planner writes each change to Redis before any request leaves for a hub
  (:class:`~scrapy_whittle.cluster.websub.PlannerWebSub`), since any process may answer the
  hub's verification from there.
* **The sitemap children**: one implementation
  (:class:`~scrapy_whittle.service.sources.index_children.IndexChildren`); what is stored is the
  children's and the indexes' rows, written with the checkpoint on both sides
  (``Checkpoint.sitemap_children``, ``sitemap_indexes``) and restored by ``load``
  (:mod:`scrapy_whittle.cluster.index_children` lays them out in Redis).

So the storage interface the service depends on is :class:`StateStore` alone; one test suite
(``tests/storage``) checks its contract on SQLite and on a real redis-server, the
subscriptions' and the sitemap children's rows among what a checkpoint writes and ``load``
reads back.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: a source's columns a checkpoint rewrites for every changed source, in this order (the
#: SQLite store's ``sources`` table names them so)
STATE_COLUMNS = ("last_crawl", "retry_at", "failures", "flags", "etag", "modified",
                 "crawls", "errors", "new_items", "utility", "rate_per_hour", "half_life_hours",
                 "mean_value", "policy_row", "entries", "alive_at")
#: a source's columns a checkpoint writes when the source is new, in this order
NEW_COLUMNS = ("id", "url", "title", "category", "weight", "min_interval")

#: the readable copies of what the policy learned, which a restore does not read
READABLE = ("rate_per_hour", "half_life_hours", "mean_value")
#: the columns a restore reads, in this order (not the readable copies, nor the titles: at a
#: million sources every column read costs a second)
LOAD_COLUMNS = ("id", "url", "category", "weight", "min_interval",
                *(c for c in STATE_COLUMNS if c not in READABLE))


class StoreError(RuntimeError):
    """The stored state cannot be used and must not be thrown away (a state file of a newer
    schema, sources whose ids are not 0..n-1)."""


@dataclass
class Checkpoint:
    """What changed since the previous checkpoint (built by the re-crawl service).

    ``new_sources`` (rows of NEW_COLUMNS) and ``source_rows`` (STATE_COLUMNS + id) are
    functions returning the rows, so that turning the service's snapshot into a million
    tuples happens in the writer's thread, not on the reactor; ``n_new`` and ``n_changed``
    count them."""

    taken_at: float
    meta: dict[str, Any] = field(default_factory=dict)
    new_sources: Callable[[], Iterable[tuple]] = lambda: ()
    source_rows: Callable[[], Iterable[tuple]] = lambda: ()
    n_new: int = 0
    n_changed: int = 0
    blocks: list[tuple[int, str, bytes]] = field(default_factory=list)
    policy: tuple[str, str, bytes] | None = None                 # name, row layout, global
    epochs: list[tuple] = field(default_factory=list)           # epochs rows, increments
    epoch_errors: list[tuple] = field(default_factory=list)     # (epoch, kind, increment)
    epoch_measures: list[tuple] = field(default_factory=list)   # (epoch, missed, delay s)
    epoch_delays: list[tuple] = field(default_factory=list)     # (epoch, bin, increment)
    #: (source, published, value) rows of the entries found, and how many fetches found them
    publications: Callable[[], Iterable[tuple]] = lambda: ()
    n_publications: int = 0
    #: publications before this unix time are deleted (None: none kept, none deleted)
    publications_since: float | None = None
    #: the story memory's changes: (story, source, seq) rows added or moved, (story,) rows
    #: forgotten, (story, source) repeats seen (:mod:`scrapy_whittle.service.memory.story_memory`)
    stories: list[tuple] = field(default_factory=list)
    stories_gone: list[tuple] = field(default_factory=list)
    story_sources: list[tuple] = field(default_factory=list)
    #: the delivery journal's segment started with this checkpoint (the older ones go once
    #: it is committed: :mod:`scrapy_whittle.service.state.deliveries`)
    journal_segment: int = 0
    #: (id, URL) of the sources that moved, and the (URL, id) aliases made since the last one
    moves: list[tuple[int, str]] = field(default_factory=list)
    aliases: list[tuple[str, int]] = field(default_factory=list)
    #: every throttled host's (host, allowance, ceiling, throttles), when they changed
    #: (None: as stored)
    hosts: list[tuple[str, float, float, int]] | None = None
    #: every WebSub subscription's row, when one changed (None: as stored)
    websub: list[tuple] | None = None
    #: the (child, parent, misses, listed_at, dropped) rows of the child sitemaps that
    #: changed
    sitemap_children: list[tuple] = field(default_factory=list)
    #: the (index, partial, listed_at, awaiting URLs) rows of the sitemap indexes whose last
    #: listing changed
    sitemap_indexes: list[tuple] = field(default_factory=list)
    #: the (seq, source, print) rows of the article fingerprints kept since the last one,
    #: and the seq below which the stored ones are forgotten
    #: (:mod:`scrapy_whittle.service.memory.article_stories`)
    article_prints: list[tuple[int, int, bytes]] = field(default_factory=list)
    article_prints_from: int = 0


@dataclass
class SavedState:
    """What a store held when it was opened: ``sources`` maps each of LOAD_COLUMNS to its
    values in id order (a sequence or a numpy array; ``policy_row``: bytes or None each,
    or the policy's rows as one structured array)."""

    meta: dict[str, Any]
    sources: dict[str, tuple]
    blocks: list[tuple[int, str, bytes]]
    policy: tuple[str, str, bytes] | None
    epochs: list[tuple]
    aliases: list[tuple[str, int]] = field(default_factory=list)
    hosts: list[tuple[str, float, float, int]] = field(default_factory=list)
    websub: list[tuple] = field(default_factory=list)
    sitemap_children: list[tuple] = field(default_factory=list)
    sitemap_indexes: list[tuple] = field(default_factory=list)

    @property
    def n_sources(self) -> int:
        return len(self.sources["id"])


class StateStore(ABC):
    """Where a crawl's learned state is kept (see the module docstring for the contract)."""

    #: where the state is, as the logs and errors name it: the SQLite file (beside which one
    #: process journals its deliveries), Redis's label and the crawl's prefix
    path: Path | str
    #: where an unusable state was moved before the crawl started afresh (None: it was not)
    moved_aside: Path | None = None

    @abstractmethod
    def load(self) -> SavedState | None:
        """Everything stored, or None for a store no checkpoint was written to."""

    @abstractmethod
    def write(self, cp: Checkpoint) -> None:
        """Commit one checkpoint (blocking: the scheduler and the planner call it in a
        thread, never on the reactor)."""

    @abstractmethod
    def stories(self) -> list[tuple[int, int, int]]:
        """The story memory's rows (story hash, first source, seq) where this store keeps
        the story memory; none where it lives elsewhere."""

    @abstractmethod
    def article_prints(self) -> list[tuple[int, int, bytes]]:
        """The text fingerprints of the last articles, (seq, source, print) rows, where this
        store keeps them (``WHITTLE_NEAR_DUPLICATES``); none where it does not."""

    @abstractmethod
    def close(self) -> None:
        """Release what the store holds (what was written stays written)."""
