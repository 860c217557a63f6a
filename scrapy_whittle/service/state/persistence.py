"""The re-crawl service's state in its store: incremental checkpoints of what changed, and the
restore after a restart (:mod:`scrapy_whittle.service.state.store` holds the tables).

A checkpoint writes what changed since the previous one: the sources registered, the rows of
the sources crawled or otherwise touched (book-keeping, validators, counters, the policy's
per-source state, the entries seen), the stories seen across sources and the sources that
repeated them (:mod:`scrapy_whittle.service.memory.story_memory`), the text fingerprints of the
last articles (:mod:`scrapy_whittle.service.memory.article_stories`), the policy's global state, the
epochs' totals and measures, and the publication times of the entries found (with the
entries seen, in the same transaction; those older than ``WHITTLE_TRACE_DAYS`` are deleted).
After a crash the crawl restarts from the last checkpoint; the entries found but not yet through the
item pipelines are handed out again from the delivery journal
(:mod:`scrapy_whittle.service.state.deliveries`): at least once, never lost."""

from __future__ import annotations

import json
import logging
import math
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from scrapy_whittle.core.columns import dtype_from_descr
from scrapy_whittle.core.policies import Policy
from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.decisions.epochs import EpochLedger, Timeline
from scrapy_whittle.service.decisions.outcomes import CrawlOutcomes
from scrapy_whittle.service.decisions.policy_keeper import PolicyKeeper
from scrapy_whittle.service.hosts.host_throttle import HostThrottle
from scrapy_whittle.service.memory.article_stories import NearDuplicates
from scrapy_whittle.service.memory.entry_memory import EntryMemory
from scrapy_whittle.service.memory.story_memory import StoryMemory
from scrapy_whittle.service.sources.registry import SourceSpec
from scrapy_whittle.service.sources.source_state import SourceState
from scrapy_whittle.service.sources.source_table import SourceTable
from scrapy_whittle.service.state.state_codec import StateDecodeError, decode, encode
from scrapy_whittle.service.state.storage import Checkpoint, SavedState, StateStore
from scrapy_whittle.service.types import Stats

# the service's own log: what a restore found is part of the crawl's story
logger = logging.getLogger("scrapy_whittle.service.recrawl")


class StatePersistence:
    """Checkpoints to ``store`` (None: the crawl keeps no state) and the restore from it.
    ``rebuild_policy(n)`` makes a fresh policy for ``n`` sources when the stored one cannot
    be restored."""

    def __init__(self, config: WhittleConfig, *, clock, timeline: Timeline,
                 sources: SourceTable, memory: EntryMemory, state: SourceState, stats: Stats,
                 keeper: PolicyKeeper, outcomes: CrawlOutcomes, ledger: EpochLedger,
                 rebuild_policy: Callable[[int], Policy], throttle: HostThrottle,
                 stories: StoryMemory | None = None,
                 prints: NearDuplicates | None = None) -> None:
        self.config = config
        self.throttle = throttle
        self.hosts_stored: list[tuple] = []       # the hosts' rows as last written
        self.stories = stories
        self.prints = prints
        self.clock = clock
        self.timeline = timeline
        self.sources = sources
        self.memory = memory
        self.state = state
        self.stats = stats
        self.keeper = keeper
        self.outcomes = outcomes
        self.ledger = ledger
        self.rebuild_policy = rebuild_policy
        self.store: StateStore | None = None
        self.new: list[tuple[int, SourceSpec]] = []     # registered since the last checkpoint
        self.moves: list[tuple[int, str]] = []          # moved since: (id, URL)
        self.aliases: list[tuple[str, int]] = []        # aliases made since: (URL, id)
        self.last_checkpoint = -math.inf

    def load(self) -> SavedState | None:
        return None if self.store is None else self.store.load()

    def sources_added(self, pairs) -> None:
        """Sources (id, spec) registered: the next checkpoint inserts them."""
        if self.store is not None:
            self.new.extend(pairs)

    def source_moved(self, sid: int, url: str | None, aliases: list[tuple[str, int]]) -> None:
        """Source ``sid`` moved to ``url`` (None: merged into another, its URL kept), making
        ``aliases``: the next checkpoint writes them."""
        if self.store is not None:
            if url is not None:
                self.moves.append((sid, url))
            self.aliases.extend(aliases)

    def checkpoint_due(self) -> bool:
        return (self.store is not None and self.keeper.policy is not None
                and time.monotonic() - self.last_checkpoint >= self.config.checkpoint_interval)

    def prepare_checkpoint(self) -> Checkpoint:
        """What changed since the previous checkpoint, ready for ``StateStore.write``, which
        may run in another thread: this takes copies of the changed rows (vectorised, on the
        caller's thread); the checkpoint turns them into SQL rows when written."""
        self.outcomes.flush()
        keeper = self.keeper
        keeper.grow()
        policy = keeper.policy
        self.last_checkpoint = time.monotonic()
        cp = Checkpoint(taken_at=self.clock.now(), meta={
            "origin": self.timeline.origin, "period": self.config.period,
            "budget": self.config.budget, "policy": self.config.core_policy,
            "download_delay": self.throttle.allowances.default_delay,
            "step": self.timeline.step})
        new, self.new = self.new, []
        cp.moves, self.moves = self.moves, []
        cp.aliases, self.aliases = self.aliases, []
        cp.n_new = len(new)
        cp.new_sources = lambda: ((sid, spec.url, spec.title, spec.category,
                                   float(spec.weight), float(spec.min_interval))
                                  for sid, spec in new)
        ids = np.flatnonzero(self.state.dirty)
        self.state.dirty[ids] = False
        cp.n_changed = int(ids.shape[0])
        if ids.size:
            cp.source_rows = _SourceRows(self._snapshot(ids))
            for name, (sub, rows) in policy.export_blocks(ids).items():
                raw, size = rows.tobytes(), rows.dtype.itemsize
                cp.blocks += [(int(s), name, raw[j * size:(j + 1) * size])
                              for j, s in enumerate(sub.tolist())]
        if keeper.touched:
            layout = json.dumps(policy.row_dtype().descr)
            cp.policy = (policy.name, layout, encode(policy.global_state()))
            keeper.touched = False
        # the epochs' totals since the last checkpoint: the store adds them up
        epochs = self.ledger.drain()
        cp.epochs, cp.epoch_errors = epochs.epochs, epochs.errors
        cp.epoch_measures, cp.epoch_delays = epochs.measures, epochs.delays
        if self.stories is not None:
            cp.stories, cp.stories_gone, cp.story_sources = self.stories.drain()
        if self.prints is not None:
            cp.article_prints, cp.article_prints_from = self.prints.drain()
        hosts = self.throttle.rows()
        if hosts != self.hosts_stored:       # a few rows, rewritten whole when one changed
            cp.hosts = self.hosts_stored = hosts
        log = self.outcomes.publications
        cp.n_publications, cp.publications = log.drain()
        if log.enabled:
            cp.publications_since = cp.taken_at - self.config.trace_days * 86400.0
        return cp

    def _snapshot(self, ids: np.ndarray) -> dict[str, Any]:
        """Copies of the state of sources ``ids`` that a checkpoint writes."""
        src, st, policy = self.sources, self.state, self.keeper.policy
        summary = policy.summary(ids)
        rows = policy.export_rows(ids)
        etags = st.etag
        return {"ids": ids, "last_crawl": src.last_crawl[ids], "retry_at": src.retry_at[ids],
                "failures": src.failures[ids], "flags": src.flags(ids),
                "etag": etags.get_many(ids),
                "modified": st.modified[ids], "crawls": st.crawls[ids],
                "errors": st.errors[ids], "new_items": st.new_items[ids],
                "utility": st.utility[ids], "rate": summary.get("rate"),
                "half_life": summary.get("half_life"), "value": summary.get("value"),
                "policy_rows": rows, "entries": self.memory.export_keys(ids),
                "alive_at": src.alive_at[ids]}

    def restore(self, saved: SavedState) -> None:
        """The stored sources' book-keeping, validators, counters, entries seen and the
        policy's state (the sources themselves are registered already)."""
        self.restore_rows(saved)
        if self.stories is not None:
            self.stories.load(self.store.stories())
        if self.prints is not None:
            self.prints.load(self.store.article_prints())
        self.keeper.touched = False
        logger.info("re-crawl service: restored %d sources from %s (checkpoint %s)",
                    saved.n_sources, self.store.path, saved.meta.get("checkpoint_seq"))

    def restore_rows(self, saved: SavedState) -> None:
        """The rows of the sources ``saved`` holds (its ``id`` column: every source, or
        those a checkpoint changed, as a standby planner follows them), the hosts'
        allowances and the policy's global state and blocks."""
        cols = saved.sources
        ids = np.asarray(cols["id"], dtype=np.int64)
        src, st = self.sources, self.state

        def array(name, fill, dtype=np.float64):
            values = np.array(cols[name], dtype=np.float64)     # NULL (None) -> NaN
            return np.where(np.isnan(values), fill, values).astype(dtype)

        src.last_crawl[ids] = array("last_crawl", -np.inf)
        src.retry_at[ids] = array("retry_at", 0.0)
        src.failures[ids] = array("failures", 0, np.int64)
        src.set_flags(ids, array("flags", 0, np.int64))
        src.alive_at[ids] = array("alive_at", np.nan)
        # the last successful fetch, which bounds the dates a fetch may teach
        # (``sanitize.learnable_times``): the last crawl, where no failure came after it
        # (where one did, unknown: the source's next fetch is treated as its first)
        last = src.last_crawl[ids]
        st.last_ok[ids] = np.where((src.failures[ids] == 0) & np.isfinite(last), last, np.nan)
        for sid, etag in zip(ids.tolist(), cols["etag"], strict=True):
            if etag:
                st.etag.set(sid, etag)
        st.modified[ids] = array("modified", 0, np.int64)
        for name in ("crawls", "errors", "new_items", "utility"):
            getattr(st, name)[ids] = array(name, 0)
        self.memory.import_keys(ids, cols["entries"])
        self.throttle.load_rows(saved.hosts)
        self.hosts_stored = self.throttle.rows()
        self._restore_policy(saved, ids)

    def repair_bookkeeping(self, now: float) -> None:
        """Restored book-keeping that would block a source for ever (a back-off or a last
        crawl that is not finite or lies beyond what the settings allow) or poison a stat (a
        counter that is not finite) is brought back into range; counted, logged once."""
        src, st = self.sources, self.state
        n = len(src)
        # a retired source waits for its next probe, which may come later than any back-off
        latest_retry = now + np.where(src.retired[:n], max(self.config.backoff_max,
                                                           self.config.retire_probe),
                                      self.config.backoff_max)
        bad = ~(src.retry_at[:n] <= latest_retry)
        bad |= np.isnan(src.last_crawl[:n]) | (src.last_crawl[:n] > now)
        bad |= ~np.isfinite(st.utility[:n])
        ids = np.flatnonzero(bad)
        if not ids.size:
            return
        src.retry_at[ids] = np.where(src.retry_at[ids] <= latest_retry[ids], src.retry_at[ids],
                                     now)
        last = src.last_crawl[ids]
        src.last_crawl[ids] = np.where(np.isnan(last) | (last > now), -np.inf, last)
        st.last_ok[ids] = np.where(np.isfinite(src.last_crawl[ids]), st.last_ok[ids], np.nan)
        st.utility[ids] = np.where(np.isfinite(st.utility[ids]), st.utility[ids], 0.0)
        self.stats.inc("state_resets", int(ids.size))
        st.touch(ids)
        logger.warning("re-crawl service: the stored book-keeping of %d sources was out of "
                       "range (back-off, last crawl or utility): repaired", ids.size)

    def _restore_policy(self, saved: SavedState, ids: np.ndarray) -> None:
        if saved.policy is None:
            return
        name, layout, blob = saved.policy
        policy = self.keeper.policy
        if name != policy.name:
            logger.warning("the stored state was learned by policy %r, not %r: the policy "
                           "starts from scratch (the sources, their entries and validators "
                           "are kept)", name, policy.name)
            return
        try:
            dtype = dtype_from_descr(json.loads(layout))
            blobs = saved.sources["policy_row"]
            if isinstance(blobs, np.ndarray):       # a store that reads them as one array
                if blobs.shape[0] and dtype.itemsize:
                    policy.import_rows(ids, blobs)
            else:
                with_rows = [i for i, b in enumerate(blobs) if b is not None]
                if with_rows and dtype.itemsize:
                    raw = b"".join(blobs[i] for i in with_rows)
                    policy.import_rows(ids[with_rows], np.frombuffer(raw, dtype=dtype))
            blocks: dict[str, tuple[list[int], list[bytes]]] = defaultdict(lambda: ([], []))
            for sid, block, data in saved.blocks:
                blocks[block][0].append(sid)
                blocks[block][1].append(data)
            policy.import_blocks(self._decode_blocks(policy, blocks))
            policy.load_global_state(decode(blob))
        except (ValueError, TypeError, KeyError, StateDecodeError) as exc:
            logger.error("the stored state of policy %r cannot be restored (%s): it starts "
                         "from scratch", name, exc)
            self.keeper.policy = self.rebuild_policy(len(self.sources))

    @staticmethod
    def _decode_blocks(policy: Policy, blocks) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        dtypes = policy.block_dtypes()
        out = {}
        for name, (sids, datas) in blocks.items():
            dtype = dtypes.get(name)
            if dtype is None or any(len(d) != dtype.itemsize for d in datas):
                raise ValueError(f"block {name!r} does not match this policy's layout")
            out[name] = (np.asarray(sids, dtype=np.int64),
                         np.frombuffer(b"".join(datas), dtype=dtype))
        return out


class _SourceRows:
    """The UPDATE rows of a checkpoint (STATE_COLUMNS + id), made from a snapshot when the
    store writes them."""

    def __init__(self, snap: dict[str, Any]) -> None:
        self.snap = snap

    def __call__(self):
        s = self.snap
        n = s["ids"].shape[0]
        rows = s["policy_rows"]
        raw, size = rows.tobytes(), rows.dtype.itemsize
        hour = 3600.0

        def readable(key, scale):
            values = s[key]
            if values is None:
                return [None] * n
            return [v * scale if math.isfinite(v) else None for v in values.tolist()]

        columns = zip(
            [x if math.isfinite(x) else None for x in s["last_crawl"].tolist()],
            s["retry_at"].tolist(), s["failures"].tolist(), s["flags"].tolist(), s["etag"],
            s["modified"].tolist(),
            s["crawls"].tolist(), s["errors"].tolist(), s["new_items"].tolist(),
            s["utility"].tolist(), readable("rate", hour), readable("half_life", 1 / hour),
            readable("value", 1.0),
            [raw[j * size:(j + 1) * size] if size else None for j in range(n)],
            s["entries"], [x if math.isfinite(x) else None for x in s["alive_at"].tolist()],
            s["ids"].tolist(), strict=True)
        return columns
