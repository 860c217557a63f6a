"""The crawl's learned state in Redis: what the SQLite store keeps, for a cluster's planner.

The planner's re-crawl service checkpoints here exactly as a single process does into
``JOBDIR/whittle.sqlite`` (same ``Checkpoint``, same ``SavedState``), so a planner elected
after another died restores what the last one learned. Layout (``keys.Keys``), sized for
millions of sources at a few hundred bytes each:

* each source is a fixed-size record (book-keeping, validators, counters, then the policy's
  per-source row) inside a string of ``CHUNK`` records, written in place with SETRANGE: a
  checkpoint costs one command per changed source and Redis stores no per-source key;
* the URLs are a list per chunk (index = source id modulo CHUNK); ETags and categories small
  hashes;
* the policy's global state one string; the epochs' aggregates a hash;
* what the service keeps of moved, dead and limited sources and hosts, as the SQLite store
  does: the moved sources' old URLs (``Keys.aliases``: URL -> id; the URL of a moved source
  is its new URL), each source's last new entry (``Keys.alive``: CHUNK doubles a string,
  written when it changed; 0: not known), the throttled hosts' allowances (``Keys.hosts``).
  A source's retirement and its run of 404s are in its record's flags. The WebSub
  subscriptions (``Keys.websub``) are read here, written by the planner as they change
  (:mod:`scrapy_whittle.cluster.websub`), not with the checkpoint. The child sitemaps of the
  sitemap indexes (``Keys.children``, :mod:`scrapy_whittle.cluster.index_children`) are
  written with the checkpoint, a row per child changed, in its tag with its record; so is
  each index's last listing (``Keys.indexes``), in the index's tag.

The per-source keys (records, URLs, ETags, last new entries) are under their sources' tags
(:mod:`scrapy_whittle.cluster.keys`), the rest under the crawl's prefix. On one Redis a
checkpoint is one MULTI/EXEC transaction, with the acknowledgement of the results it learned
from: a planner that dies between two checkpoints leaves those results pending in the stream,
and the next planner learns them again from the restored state. On a Redis Cluster, where a
transaction touches one slot, it is one transaction per tag, then the crawl-wide one (the
policy's global state, the aggregates, the meta, the acknowledgements); each tag's
transaction also records which results (source and crawl id) its records learnt, with the
checkpoint's number (``Keys.checkpoint``). A planner that dies after some tags' transactions
leaves tags a checkpoint ahead of the meta: the next one restores them as written and takes
those results for learnt (:attr:`RedisStateStore.applied`) rather than learning them twice;
what it loses is that one checkpoint's crawl-wide part (the policy's global state and the
epochs' aggregates stay at the previous checkpoint's).
Each checkpoint also adds what it changed to the stream ``Keys.changes``, in its crawl-wide
part (the ids of the sources it registered or wrote, the moves, aliases and blocks, whether
the policy's global state and the hosts changed; the last ``CHANGES_KEPT`` checkpoints),
which a standby planner follows (:mod:`scrapy_whittle.cluster.standby`) with
:meth:`RedisStateStore.load_sources`. Each tag's part records the ids and moves it wrote
too: the sources of tags a checkpoint ahead (:attr:`RedisStateStore.ahead`) are read again
by a standby taking over, and named in the next checkpoint's changes, so that a standby
following holds what a restore reads.

The calls are blocking (the ``redis`` client's synchronous API): the planner runs them in a
thread, never on the reactor.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import numpy as np

from scrapy_whittle.cluster import index_children
from scrapy_whittle.cluster.keys import BUCKET, CHUNK, LAYOUT, SPREAD, Keys
from scrapy_whittle.cluster.websub import saved_rows
from scrapy_whittle.core.columns import dtype_from_descr
from scrapy_whittle.service.state.storage import Checkpoint, SavedState, StateStore

#: last_crawl, retry_at, failures, flags, modified (unix s), crawls, errors, new_items,
#: utility, weight, min_interval (the last two written when the source is registered)
STATE = "<ddiQIIIIf"
HEADER = struct.Struct(STATE + "ff")
STATE_PART = struct.calcsize(STATE)
EPOCH_FIELDS = ("crawls", "cost", "new_items", "utility", "errors", "not_modified")
#: checkpoints the stream ``Keys.changes`` keeps (about: it is trimmed by whole nodes); a
#: standby that falls further behind restores the whole state again
CHANGES_KEPT = 64
#: sources :meth:`RedisStateStore.load_sources` reads in one script call (Redis answers
#: nothing else meanwhile: a few milliseconds)
READ_PAGE = 2000

#: The records, last new entries and ETags of some sources, in one call (a pipeline of three
#: commands a source costs the client more than Redis). KEYS: per source, its records' chunk,
#: its last-new-entry chunk, its ETags' bucket; ARGV: the record's size, then per source its
#: place in its chunk and its id. Returns the records and the last new entries, each
#: concatenated (zeros where nothing was written), and the ETags ("" for none).
READ_SOURCES = """
local size = tonumber(ARGV[1])
local records, alive, etags = {}, {}, {}
for i = 1, (#ARGV - 1) / 2 do
  local at = tonumber(ARGV[2 * i])
  local r = redis.call('GETRANGE', KEYS[3 * i - 2], at * size, at * size + size - 1)
  if #r < size then r = r .. string.rep('\0', size - #r) end
  records[i] = r
  local a = redis.call('GETRANGE', KEYS[3 * i - 1], at * 8, at * 8 + 7)
  if #a < 8 then a = a .. string.rep('\0', 8 - #a) end
  alive[i] = a
  etags[i] = redis.call('HGET', KEYS[3 * i], ARGV[2 * i + 1]) or ''
end
return {table.concat(records), table.concat(alive), etags}
"""


class RedisStateStore(StateStore):
    """The :class:`~scrapy_whittle.service.state.storage.StateStore` of a cluster's planner, on
    Redis (see the module docstring)."""

    def __init__(self, client, keys: Keys, label: str = "redis") -> None:
        from redis.cluster import RedisCluster

        self.client = client
        self.keys = keys
        self.path = f"{label} ({keys.prefix})"
        self.moved_aside = None
        #: a transaction per tag (a Redis Cluster), or one for everything (one Redis)
        self.per_tag = isinstance(client, RedisCluster)
        #: the last checkpoint's number (the next one writes it plus one)
        self.seq = 0
        #: (source, crawl id) of the results a checkpoint cut short learnt into its tags'
        #: records (``load``): acknowledged, not learnt again
        self.applied: set[tuple[int, str]] = set()
        #: the sources of those tags (the records a restore reads a checkpoint ahead), which
        #: the next checkpoint names in ``Keys.changes`` for the standbys following
        self.ahead: list[int] = []
        self.ahead_moves: list[tuple[int, str]] = []
        #: each source's last new entry as written (NaN: none), so that a checkpoint writes
        #: only those that changed
        self._alive = np.full(0, np.nan)
        self._read = None                # READ_SOURCES, registered at its first use

    # -- writing ----------------------------------------------------------------------------
    def write(self, cp: Checkpoint, acks: list[str] | None = None,
              done: list[int] | None = None,
              learnt: list[tuple[int, str]] | None = None) -> None:
        """Commit ``cp`` with the acknowledgement of the results ``acks`` it learnt from and
        the end of the crawls ``done`` (source ids: their in-flight records), atomically on
        one Redis, tag by tag then crawl-wide on a Redis Cluster (``learnt``: the learnt
        results' source and crawl id, recorded with their tags)."""
        k = self.keys
        seq = self.seq + 1
        crawl = self.client.pipeline(transaction=True)
        tags: dict[int, Any] = {}

        def at(sid: int):
            """The pipeline of ``sid``'s tag."""
            if not self.per_tag:
                return crawl
            t = Keys.tag_of(sid)
            if t not in tags:
                tags[t] = self.client.pipeline(transaction=True)
            return tags[t]

        layout = None
        if cp.policy is not None:
            name, layout, blob = cp.policy
            crawl.set(k.global_state, blob)
            crawl.hset(k.meta, mapping={"policy_name": name, "layout": layout})
        else:
            layout = self.client.hget(k.meta, "layout")
            layout = layout.decode() if isinstance(layout, bytes) else layout
        row_size = _row_size(layout)
        record = HEADER.size + row_size
        changed: list[int] = []
        for sid, url, _title, category, weight, min_interval in cp.new_sources():
            pipe = at(sid)
            changed.append(sid)
            if sid % CHUNK == 0:       # a new chunk: its whole length at once, no slack
                # (what a checkpoint cut short left there goes first)
                pipe.delete(k.rows(sid), k.alive(sid), k.urls(sid))
                pipe.setrange(k.rows(sid), CHUNK * record - 1, b"\0")
                pipe.setrange(k.alive(sid), CHUNK * 8 - 1, b"\0")
            pipe.rpush(k.urls(sid), url)
            if category:
                crawl.hset(k.categories, sid, category)
            pipe.setrange(k.rows(sid), (sid % CHUNK) * record + STATE_PART,
                          struct.pack("<ff", weight, min_interval))
        for sid, url in cp.moves:
            at(sid).lset(k.urls(sid), sid % CHUNK, url)
        if cp.aliases:
            crawl.hset(k.aliases, mapping=dict(cp.aliases))
        if cp.hosts is not None:
            crawl.delete(k.hosts)
            if cp.hosts:
                crawl.hset(k.hosts, mapping={h: json.dumps([a, c if math.isfinite(c) else None,
                                                            t]) for h, a, c, t in cp.hosts})
        alive, written = self._alive, []
        for row in cp.source_rows():
            (last_crawl, retry_at, failures, flags, etag, modified, crawls, errors,
             new_items, utility, _rate, _half, _value, policy_row, _entries, alive_at,
             sid) = row
            pipe = at(sid)
            changed.append(sid)
            if alive_at is not None and not (sid < alive.shape[0] and alive[sid] == alive_at):
                pipe.setrange(k.alive(sid), (sid % CHUNK) * 8, struct.pack("<d", alive_at))
                written.append((sid, alive_at))
            state = struct.pack(STATE, -1.0 if last_crawl is None else last_crawl,
                                retry_at, failures, flags, modified, crawls,
                                errors, new_items, utility)
            offset = (sid % CHUNK) * record
            pipe.setrange(k.rows(sid), offset, state)
            if row_size and policy_row:
                pipe.setrange(k.rows(sid), offset + HEADER.size, policy_row)
            if etag:
                pipe.hset(k.etags(sid), sid, etag)
        index_children.write(at, k, cp.sitemap_children)
        index_children.write_indexes(at, k, cp.sitemap_indexes)
        if self.per_tag:
            learnt_by_tag: dict[int, list[str]] = {}
            for sid, cid in learnt or ():
                learnt_by_tag.setdefault(Keys.tag_of(sid), []).append(f"{sid} {cid}")
            for t in learnt_by_tag:
                if t not in tags:
                    tags[t] = self.client.pipeline(transaction=True)
            ids_by_tag: dict[int, list[int]] = {}
            for sid in changed:
                ids_by_tag.setdefault(Keys.tag_of(sid), []).append(sid)
            moves_by_tag: dict[int, list[tuple[int, str]]] = {}
            for sid, url in cp.moves:
                moves_by_tag.setdefault(Keys.tag_of(sid), []).append((sid, url))
            for t, pipe in tags.items():
                pipe.hset(k.checkpoint(t), mapping={
                    "seq": seq, "learnt": "\n".join(learnt_by_tag.get(t, ())),
                    "ids": np.asarray(ids_by_tag.get(t, ()), dtype="<u4").tobytes(),
                    "moves": json.dumps(moves_by_tag.get(t, []))})
        for sid, block, data in cp.blocks:
            crawl.hset(k.blocks, f"{block}:{sid}", data)
        for epoch, *values in cp.epochs:          # increments since the last checkpoint
            for name, value in zip(EPOCH_FIELDS, values, strict=True):
                if value:
                    crawl.hincrbyfloat(k.epochs, f"{epoch}:{name}", value)
        for epoch, kind, count in cp.epoch_errors:
            crawl.hincrby(k.epoch_errors, f"{epoch}:{kind}", count)
        crawl.hset(k.meta, mapping={key: json.dumps(value) for key, value in
                                    {**cp.meta, "checkpoint_at": cp.taken_at}.items()})
        crawl.hset(k.meta, mapping={"checkpoint_seq": seq, "keys_layout": LAYOUT})
        ids = np.unique(np.asarray(changed + [sid for sid, _ in cp.moves] + self.ahead,
                                   dtype="<u4"))
        crawl.xadd(k.changes, {
            "ids": ids.tobytes(),
            "moves": json.dumps(self.ahead_moves + list(cp.moves)),
            "aliases": json.dumps(cp.aliases),
            "blocks": json.dumps([f"{block}:{sid}" for sid, block, _ in cp.blocks]),
            "policy": int(cp.policy is not None), "hosts": int(cp.hosts is not None)},
            maxlen=CHANGES_KEPT, approximate=True)
        if acks:
            crawl.xack(k.results, "planner", *acks)
            crawl.xdel(k.results, *acks)
        if done:
            crawl.hdel(k.in_flight, *done)
        for pipe in tags.values():      # each tag's records before the crawl-wide part
            pipe.execute()
        crawl.execute()
        self.seq = seq
        self.ahead, self.ahead_moves = [], []   # named in the changes: read again there
        if written:                 # committed: what the next checkpoint compares with
            top = max(sid for sid, _ in written) + 1
            if top > alive.shape[0]:
                alive = self._alive = np.concatenate(
                    [alive, np.full(max(top - alive.shape[0], CHUNK), np.nan)])
            for sid, value in written:
                alive[sid] = value

    # -- reading ----------------------------------------------------------------------------
    def stories(self) -> list[tuple[int, int, int]]:
        """None: a cluster's workers tell new entries and stories in Redis
        (:mod:`scrapy_whittle.cluster.stories`), so its planner has no stories to restore."""
        return []

    def article_prints(self) -> list[tuple[int, int, bytes]]:
        """None: a cluster does not compare its articles' texts."""
        return []

    def load(self) -> SavedState | None:
        k = self.keys
        raw_meta = self.client.hgetall(k.meta)
        meta = {_s(key): _s(value) for key, value in raw_meta.items()}
        if "origin" not in meta:
            return None
        check_layout(meta, self.keys.prefix)
        self.seq = int(meta.get("checkpoint_seq") or 0)
        parsed: dict[str, Any] = {}
        for key, value in meta.items():
            try:
                parsed[key] = json.loads(value)
            except (TypeError, ValueError):
                parsed[key] = value
        urls = self.urls()
        n = len(urls)
        layout = meta.get("layout")
        row_size = _row_size(layout)
        alive = np.full(n, np.nan)
        if n:
            n_chunks = -(-n // CHUNK)
            packed = bytearray()
            for first in range(0, n_chunks, 256):        # a page of chunks at a time
                got = self._gets([k.alive(c * CHUNK)
                                  for c in range(first, min(n_chunks, first + 256))])
                packed += b"".join((c or b"").ljust(CHUNK * 8, b"\0")[:CHUNK * 8] for c in got)
            alive = np.frombuffer(bytes(packed), dtype="<f8", count=n).copy()
            alive[alive == 0.0] = np.nan               # not known
        self._alive = alive.copy()
        records = self._records(n, layout)
        categories = [""] * n
        for i, c in self.client.hgetall(k.categories).items():
            if int(i) < n:
                categories[int(i)] = _s(c)
        etags: list[str | None] = [None] * n
        buckets = range(-(-n // BUCKET))
        for first in range(0, len(buckets), 1000):       # a pipeline of 1000 buckets a time
            pipe = self.client.pipeline(transaction=False)
            for b in buckets[first:first + 1000]:
                pipe.hgetall(k.etags(b * BUCKET))
            for bucket in pipe.execute():
                for i, e in bucket.items():
                    if int(i) < n:
                        etags[int(i)] = _s(e)
        cols = _columns(range(n), urls, categories, etags, alive, records, row_size)
        blocks = [_block(key, value) for key, value in self.client.hgetall(k.blocks).items()]
        glob = self.client.get(k.global_state)
        policy = (meta.get("policy_name"), layout, glob) if glob is not None else None
        by_epoch: dict[int, list[float]] = {}
        for key, value in self.client.hgetall(k.epochs).items():
            epoch, name = _s(key).split(":")
            by_epoch.setdefault(int(epoch), [0.0] * len(EPOCH_FIELDS))[
                EPOCH_FIELDS.index(name)] = float(value)
        epochs = sorted((e, *v) for e, v in by_epoch.items())
        aliases = [(_s(u), int(i)) for u, i in self.client.hgetall(k.aliases).items()]
        self.applied, self.ahead, self.ahead_moves = self._ahead(n)
        return SavedState(meta=parsed, sources=cols,
                          blocks=blocks, policy=policy, epochs=epochs, aliases=aliases,
                          hosts=self._hosts(), websub=saved_rows(self.client, k),
                          sitemap_children=index_children.saved_rows(self.client, k),
                          sitemap_indexes=index_children.saved_indexes(self.client, k))

    def _hosts(self) -> list[tuple[str, float, float, int]]:
        hosts = []
        for host, raw in self.client.hgetall(self.keys.hosts).items():
            allowance, ceiling, throttles = json.loads(raw)
            hosts.append((_s(host), float(allowance),
                          math.inf if ceiling is None else float(ceiling), int(throttles)))
        return hosts

    def load_sources(self, ids: np.ndarray, n: int, moves: list[tuple[int, str]],
                     aliases: list[tuple[str, int]], blocks: list[str], policy: bool,
                     hosts: bool) -> SavedState:
        """Part of what :meth:`load` reads, as it reads it: the sources ``ids`` (ascending;
        those from ``n`` on registered since a restore of ``n`` sources: their URLs and
        categories too; ``moves``: the URLs of those that moved), the ``blocks`` named
        ("<block>:<id>"), the policy's global state if ``policy``, every throttled host if
        ``hosts`` (the throttled hosts only ever grow in number). For a
        standby following the checkpoints (``Keys.changes``): ``url`` is None for a source
        that neither joined nor moved, ``aliases`` are passed through."""
        k, client = self.keys, self.client
        meta = {key: _s(value) for key, value in
                zip(("layout", "policy_name"), client.hmget(k.meta, ["layout", "policy_name"]),
                    strict=True) if value is not None}
        layout = meta.get("layout")
        row_size = _row_size(layout)
        dtype = record_dtype(layout)
        ids = np.asarray(ids, dtype=np.int64)
        records = np.zeros(ids.shape[0], dtype=dtype)
        alive = np.zeros(ids.shape[0], dtype="<f8")
        etags: list[str | None] = [None] * ids.shape[0]
        for at in self._read_pages(ids):
            got_records, got_alive, got_etags = self._read_page(ids[at], dtype.itemsize)
            records[at] = np.frombuffer(got_records, dtype=dtype, count=at.shape[0])
            alive[at] = np.frombuffer(got_alive, dtype="<f8", count=at.shape[0])
            for j, e in zip(at.tolist(), got_etags, strict=True):
                etags[j] = _s(e) or None
        alive[alive == 0.0] = np.nan                   # not known
        if ids.shape[0]:
            top = int(ids[-1]) + 1
            if top > self._alive.shape[0]:          # what the next checkpoint compares with
                self._alive = np.concatenate([self._alive,
                                              np.full(top - self._alive.shape[0], np.nan)])
            self._alive[ids] = alive
        joined = ids[ids >= n]
        urls: list[str | None] = [None] * ids.shape[0]
        categories = [""] * ids.shape[0]
        if joined.size:
            at = ids.shape[0] - joined.size
            pipe = client.pipeline(transaction=False)
            first, last = int(joined[0]), int(joined[-1])
            for c in range(first // CHUNK, last // CHUNK + 1):    # their chunks' lists
                pipe.lrange(k.urls(c * CHUNK), max(first - c * CHUNK, 0),
                            min(last - c * CHUNK, CHUNK - 1))
            urls[at:] = [_s(u) for got in pipe.execute() for u in got]
            categories[at:] = [_s(c) if c is not None else ""
                               for c in client.hmget(k.categories, joined.tolist())]
        where = {sid: j for j, sid in enumerate(ids.tolist())}
        for sid, url in moves:
            if sid in where:
                urls[where[sid]] = url
        cols = _columns(ids, urls, categories, etags, alive, records, row_size)
        found = client.hmget(k.blocks, blocks) if blocks else []
        glob = client.get(k.global_state) if policy else None
        return SavedState(
            meta=meta, sources=cols,
            blocks=[_block(key, value) for key, value in zip(blocks, found, strict=True)
                    if value is not None],
            policy=(meta.get("policy_name"), layout, glob) if glob is not None else None,
            epochs=[], aliases=list(aliases), hosts=self._hosts() if hosts else [])

    def _read_pages(self, ids: np.ndarray) -> list[np.ndarray]:
        """Where in ``ids`` each call of ``READ_SOURCES`` reads (at most ``READ_PAGE``
        sources): on a Redis Cluster the sources of one tag (one script touches one slot)."""
        if not self.per_tag:
            return [np.arange(first, min(first + READ_PAGE, ids.shape[0]))
                    for first in range(0, ids.shape[0], READ_PAGE)]
        tags = (ids // CHUNK) % SPREAD
        pages = []
        for t in np.unique(tags).tolist():
            at = np.flatnonzero(tags == t)
            pages += [at[first:first + READ_PAGE] for first in range(0, at.shape[0], READ_PAGE)]
        return pages

    def _read_page(self, ids: np.ndarray, size: int) -> tuple[bytes, bytes, list]:
        if self._read is None:
            self._read = self.client.register_script(READ_SOURCES)
        k = self.keys
        keys, args = [], [size]
        for sid in ids.tolist():
            keys += (k.rows(sid), k.alive(sid), k.etags(sid))
            args += (sid % CHUNK, sid)
        records, alive, etags = self._read(keys=keys, args=args)
        return records, alive, etags

    def ahead_of(self, seq: int, n: int) -> tuple[set[tuple[int, str]], list[int],
                                                  list[tuple[int, str]]]:
        """What the tags a checkpoint ahead of checkpoint ``seq`` hold (a planner died in
        the middle of that checkpoint's transactions), as :meth:`load` would take them with
        ``n`` sources restored: the results they learnt, the ids of the sources they wrote
        (those a restore reads: registered before ``n`` or in the URL lists it reads on)
        and their moves. For a standby taking over."""
        self.seq = seq
        return self._ahead(self.count_from(n))

    def _gets(self, names: list[str]) -> list:
        """GET of each key (a pipeline: on a Redis Cluster they are on many shards)."""
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.get(name)
        return pipe.execute()

    def urls(self, page: int = 256) -> list[str]:
        """The URLs, a chunk's list after another up to the first that is not full, read a
        page of chunks at a time (a bounded reply for ten million)."""
        urls: list[str] = []
        while True:
            pipe = self.client.pipeline(transaction=False)
            first = len(urls) // CHUNK
            for c in range(first, first + page):
                pipe.lrange(self.keys.urls(c * CHUNK), 0, CHUNK - 1)
            for got in pipe.execute():
                text = b"\n".join(got).decode("utf-8", "surrogatepass").split("\n")
                urls += text if len(text) == len(got) and got else [_s(u) for u in got]
                if len(got) < CHUNK:
                    return urls

    def _ahead(self, n: int) -> tuple[set[tuple[int, str]], list[int],
                                      list[tuple[int, str]]]:
        """What the tags a checkpoint ahead of the meta hold (a planner died in the middle
        of that checkpoint's transactions): the results they learnt, the ids of the sources
        they wrote (those below ``n``, the sources a restore reads) and their moves."""
        pipe = self.client.pipeline(transaction=False)
        for t in range(SPREAD):
            pipe.hmget(self.keys.checkpoint(t), "seq", "learnt", "ids", "moves")
        learnt_all, ids, moves = set(), [], []
        for seq, learnt, written, moved in pipe.execute():
            if seq is None or int(seq) != self.seq + 1:
                continue
            for line in _s(learnt).split("\n") if learnt else ():
                sid, cid = line.split(" ", 1)
                learnt_all.add((int(sid), cid))
            moved = [(int(sid), url) for sid, url in json.loads(moved or "[]") if sid < n]
            moves += moved
            ids += [sid for sid in np.frombuffer(written or b"", dtype="<u4").tolist()
                    if sid < n] + [sid for sid, _ in moved]
        return learnt_all, sorted(set(ids)), moves

    def count_from(self, n: int) -> int:
        """How many sources a restore reads (:meth:`urls`), knowing the first ``n``: the
        URL lists' lengths from ``n``'s chunk up to the first that is not full."""
        c = n // CHUNK
        while True:
            got = self.client.llen(self.keys.urls(c * CHUNK))
            if got < CHUNK:
                return max(n, c * CHUNK + got)
            c += 1

    def _records(self, n: int, layout: str | None, page: int = 256) -> np.ndarray:
        """The N fixed records as one structured array (``record_dtype``), read a page of
        chunks at a time; a chunk never written reads as zeros."""
        dtype = record_dtype(layout)
        size = CHUNK * dtype.itemsize
        out = np.zeros(-(-n // CHUNK) * CHUNK, dtype=dtype)
        raw = out.view(np.uint8)
        n_chunks = -(-n // CHUNK)
        for first in range(0, n_chunks, page):
            got = self._gets([self.keys.rows(c * CHUNK)
                              for c in range(first, min(n_chunks, first + page))])
            for j, chunk in enumerate(got):
                if chunk:
                    at = (first + j) * size
                    raw[at:at + min(len(chunk), size)] = np.frombuffer(chunk[:size], np.uint8)
        return out[:n]

    def close(self) -> None:
        """Nothing to release: the client belongs to the caller."""


class LayoutMismatch(ValueError):
    """The crawl's keys in Redis are of another layout than this version writes."""


def check_layout(meta: dict[str, str], prefix: str) -> None:
    """Raise LayoutMismatch when the crawl whose meta is ``meta`` (decoded; a crawl begun)
    was written in another key layout than :data:`~scrapy_whittle.cluster.keys.LAYOUT`."""
    found = meta.get("keys_layout")
    if "origin" in meta and found != str(LAYOUT):
        raise LayoutMismatch(
            f"the crawl under WHITTLE_REDIS_PREFIX {prefix!r} was begun by an earlier "
            f"scrapy-whittle whose Redis keys are laid out otherwise (layout "
            f"{found or 1}, this version reads {LAYOUT}): finish it with that version, or "
            f"start it afresh under another WHITTLE_REDIS_PREFIX (or after deleting its keys, "
            f"{prefix}:*); see docs/upgrading.md")


def _columns(ids, urls, categories, etags, alive, records: np.ndarray,
             row_size: int) -> dict[str, Any]:
    """The columns of a :class:`SavedState`'s sources from what Redis holds of them."""
    n = len(ids)
    last_crawl = records["last_crawl"].astype(np.float64)
    return {
        "id": ids, "url": urls, "category": categories,
        "weight": records["weight"], "min_interval": records["min_interval"],
        "last_crawl": np.where(last_crawl < 0, np.nan, last_crawl),   # never: NULL
        "retry_at": records["retry_at"], "failures": records["failures"],
        "flags": records["flags"], "etag": etags, "modified": records["modified"],
        "crawls": records["crawls"], "errors": records["errors"],
        "new_items": records["new_items"], "utility": records["utility"],
        # the policy's rows as one structured array (persistence imports it whole)
        "policy_row": records["policy_row"] if row_size else [None] * n,
        "entries": [None] * n, "alive_at": alive}


def _block(key, value) -> tuple[int, str, bytes]:
    """(id, block, data) of the field ``<block>:<id>`` of ``Keys.blocks``."""
    block, sid = _s(key).rsplit(":", 1)
    return int(sid), block, value


def _s(value) -> str:
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else str(value)


def record_dtype(layout: str | None) -> np.dtype:
    """One source's record (``HEADER``, then the policy's row) as a packed numpy dtype."""
    fields = [("last_crawl", "<f8"), ("retry_at", "<f8"), ("failures", "<i4"),
              ("flags", "<u8"), ("modified", "<u4"), ("crawls", "<u4"), ("errors", "<u4"),
              ("new_items", "<u4"), ("utility", "<f4"), ("weight", "<f4"),
              ("min_interval", "<f4")]
    if layout:
        fields.append(("policy_row", dtype_from_descr(json.loads(layout))))
    return np.dtype(fields)


def _row_size(layout: str | None) -> int:
    return dtype_from_descr(json.loads(layout)).itemsize if layout else 0
