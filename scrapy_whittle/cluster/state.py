"""The crawl's learned state in Redis: what the SQLite store keeps, for a cluster's planner.

The planner's re-crawl service checkpoints here exactly as a single process does into
``JOBDIR/whittle.sqlite`` (same ``Checkpoint``, same ``SavedState``), so a planner elected
after another died restores what the last one learned. Layout (``keys.Keys``), sized for a
million sources at a few hundred bytes each:

* each source is a fixed-size record (book-keeping, validators, counters, then the policy's
  per-source row) inside a string of ``CHUNK`` records, written in place with SETRANGE: a
  checkpoint costs one command per changed source and Redis stores no per-source key;
* the URLs are a list (index = source id); ETags and categories small hashes;
* the policy's global state one string; the epochs' aggregates a hash;
* what the service keeps of moved, dead and limited sources and hosts, as the SQLite store
  does: the moved sources' old URLs (``Keys.aliases``: URL -> id; the ``urls`` entry of a
  moved source is its new URL), each source's last new entry (``Keys.alive``: CHUNK
  doubles a string, written when it changed; 0: not known, as a crawl of an older version
  left it), the throttled hosts' allowances (``Keys.hosts``). A source's retirement and its
  run of 404s are in its record's flags.

A checkpoint is one MULTI/EXEC transaction, with the acknowledgement of the results it
learned from: a planner that dies between two checkpoints leaves those results pending in
the stream, and the next planner learns them again from the restored state. The same
transaction adds what it changed to the stream ``Keys.changes`` (the ids of the sources it
registered or wrote, the moves, aliases and blocks, whether the policy's global state and
the hosts changed; the last ``CHANGES_KEPT`` checkpoints), which a standby planner follows
(:mod:`scrapy_whittle.cluster.standby`) with :meth:`RedisStateStore.load_sources`.

The calls are blocking (the ``redis`` client's synchronous API): the planner runs them in a
thread, never on the reactor.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import numpy as np

from scrapy_whittle.cluster.keys import BUCKET, CHUNK, Keys
from scrapy_whittle.core.columns import dtype_from_descr
from scrapy_whittle.service.store import Checkpoint, SavedState

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


class RedisStateStore:
    """``StateStore``'s interface (``load``, ``write``, ``close``, ``path``) on Redis."""

    def __init__(self, client, keys: Keys, label: str = "redis") -> None:
        self.client = client
        self.keys = keys
        self.path = f"{label} ({keys.prefix})"
        self.moved_aside = None
        #: each source's last new entry as written (NaN: none), so that a checkpoint writes
        #: only those that changed
        self._alive = np.full(0, np.nan)
        self._read = None                # READ_SOURCES, registered at its first use

    # -- writing ----------------------------------------------------------------------------
    def write(self, cp: Checkpoint, acks: list[str] | None = None,
              done: list[int] | None = None) -> None:
        """Commit ``cp`` with the acknowledgement of the results ``acks`` it learnt from and
        the end of the crawls ``done`` (source ids: their in-flight records), atomically."""
        k = self.keys
        pipe = self.client.pipeline(transaction=True)
        layout = None
        if cp.policy is not None:
            name, layout, blob = cp.policy
            pipe.set(k.global_state, blob)
            pipe.hset(k.meta, mapping={"policy_name": name, "layout": layout})
        else:
            layout = self.client.hget(k.meta, "layout")
            layout = layout.decode() if isinstance(layout, bytes) else layout
        row_size = _row_size(layout)
        record = HEADER.size + row_size
        changed: list[int] = []
        for sid, url, _title, category, weight, min_interval in cp.new_sources():
            changed.append(sid)
            if sid % CHUNK == 0:       # a new chunk: its whole length at once, no slack
                pipe.setrange(k.rows(sid), CHUNK * record - 1, b"\0")
                pipe.setrange(k.alive(sid), CHUNK * 8 - 1, b"\0")
            pipe.rpush(k.urls, url)
            if category:
                pipe.hset(k.categories, sid, category)
            pipe.setrange(k.rows(sid), (sid % CHUNK) * record + STATE_PART,
                          struct.pack("<ff", weight, min_interval))
        for sid, url in cp.moves:
            pipe.lset(k.urls, sid, url)
        if cp.aliases:
            pipe.hset(k.aliases, mapping=dict(cp.aliases))
        if cp.hosts is not None:
            pipe.delete(k.hosts)
            if cp.hosts:
                pipe.hset(k.hosts, mapping={h: json.dumps([a, c if math.isfinite(c) else None,
                                                           t]) for h, a, c, t in cp.hosts})
        alive, written = self._alive, []
        for row in cp.source_rows():
            (last_crawl, retry_at, failures, flags, etag, modified, crawls, errors,
             new_items, utility, _rate, _half, _value, policy_row, _entries, alive_at,
             sid) = row
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
        for sid, block, data in cp.blocks:
            pipe.hset(k.blocks, f"{block}:{sid}", data)
        for epoch, *values in cp.epochs:          # increments since the last checkpoint
            for name, value in zip(EPOCH_FIELDS, values, strict=True):
                if value:
                    pipe.hincrbyfloat(k.epochs, f"{epoch}:{name}", value)
        for epoch, kind, count in cp.epoch_errors:
            pipe.hincrby(k.epoch_errors, f"{epoch}:{kind}", count)
        pipe.hset(k.meta, mapping={key: json.dumps(value) for key, value in
                                   {**cp.meta, "checkpoint_at": cp.taken_at}.items()})
        pipe.hincrby(k.meta, "checkpoint_seq", 1)
        pipe.xadd(k.changes, {
            "ids": np.unique(np.asarray(changed + [sid for sid, _ in cp.moves],
                                        dtype="<u4")).tobytes(),
            "moves": json.dumps(cp.moves), "aliases": json.dumps(cp.aliases),
            "blocks": json.dumps([f"{block}:{sid}" for sid, block, _ in cp.blocks]),
            "policy": int(cp.policy is not None), "hosts": int(cp.hosts is not None)},
            maxlen=CHANGES_KEPT, approximate=True)
        if acks:
            pipe.xack(k.results, "planner", *acks)
            pipe.xdel(k.results, *acks)
        if done:
            pipe.hdel(k.in_flight, *done)
        pipe.execute()
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

    def load(self) -> SavedState | None:
        k = self.keys
        raw_meta = self.client.hgetall(k.meta)
        meta = {_s(key): _s(value) for key, value in raw_meta.items()}
        if "origin" not in meta:
            return None
        parsed: dict[str, Any] = {}
        for key, value in meta.items():
            try:
                parsed[key] = json.loads(value)
            except (TypeError, ValueError):
                parsed[key] = value
        urls = self._urls()
        n = len(urls)
        layout = meta.get("layout")
        row_size = _row_size(layout)
        alive = np.full(n, np.nan)
        if n:
            n_chunks = -(-n // CHUNK)
            packed = bytearray()
            for first in range(0, n_chunks, 256):        # a page of chunks at a time
                got = self.client.mget([k.alive(c * CHUNK)
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
        return SavedState(meta=parsed, sources=cols,
                          blocks=blocks, policy=policy, epochs=epochs, aliases=aliases,
                          hosts=self._hosts())

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
        if self._read is None:
            self._read = client.register_script(READ_SOURCES)
        raw, alive_raw, etags = [], [], []
        for first in range(0, ids.shape[0], READ_PAGE):
            keys, args = [], [dtype.itemsize]
            for sid in ids[first:first + READ_PAGE].tolist():
                keys += (k.rows(sid), k.alive(sid), k.etags(sid))
                args += (sid % CHUNK, sid)
            records, alive, tags = self._read(keys=keys, args=args)
            raw.append(records)
            alive_raw.append(alive)
            etags += [_s(e) or None for e in tags]
        records = np.frombuffer(b"".join(raw), dtype=dtype, count=ids.shape[0])
        alive = np.frombuffer(b"".join(alive_raw), dtype="<f8", count=ids.shape[0]).copy()
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
            got = client.lrange(k.urls, int(joined[0]), int(joined[-1]))
            urls[at:] = [_s(u) for u in got]
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

    def _urls(self, page: int = 1_000_000) -> list[str]:
        """The URL list, read a page at a time (a bounded reply for ten million)."""
        urls: list[str] = []
        while True:
            got = self.client.lrange(self.keys.urls, len(urls), len(urls) + page - 1)
            text = b"\n".join(got).decode("utf-8", "surrogatepass").split("\n")
            urls += text if len(text) == len(got) else [_s(u) for u in got]
            if len(got) < page:
                return urls

    def _records(self, n: int, layout: str | None, page: int = 256) -> np.ndarray:
        """The N fixed records as one structured array (``record_dtype``), read a page of
        chunks at a time; a chunk never written reads as zeros."""
        dtype = record_dtype(layout)
        size = CHUNK * dtype.itemsize
        out = np.zeros(-(-n // CHUNK) * CHUNK, dtype=dtype)
        raw = out.view(np.uint8)
        n_chunks = -(-n // CHUNK)
        for first in range(0, n_chunks, page):
            got = self.client.mget([self.keys.rows(c * CHUNK)
                                    for c in range(first, min(n_chunks, first + page))])
            for j, chunk in enumerate(got):
                if chunk:
                    at = (first + j) * size
                    raw[at:at + min(len(chunk), size)] = np.frombuffer(chunk[:size], np.uint8)
        return out[:n]

    def close(self) -> None:
        """Nothing to release: the client belongs to the caller."""


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
