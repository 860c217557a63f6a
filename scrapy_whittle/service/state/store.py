"""The crawl's state in SQLite (``JOBDIR/whittle.sqlite``), written incrementally.

Tables (schema version 8; ``sqlite3 JOBDIR/whittle.sqlite .schema`` shows them):

* ``meta(key, value)``: ``schema_version``, ``origin`` (unix time of epoch 0), ``period``,
  ``budget``, ``policy``, ``download_delay``, ``step`` (seconds between two decisions),
  ``checkpoint_seq`` and ``checkpoint_at`` (unix time the last checkpoint's state was
  taken);
* ``sources``: one row per source: ``id``, ``url``, ``title``, ``category``, ``weight``,
  ``min_interval``; the crawl book-keeping ``last_crawl``, ``retry_at`` (back-off or a
  server's "not before"), ``failures``, ``flags`` (the feed's skipHours in bits 0-23, its
  skipDays in bits 24-30; bit 32: the source is on the WHITTLE_SOURCES list, bit 33: it was
  and left it, and is no longer crawled; bit 34: it is retired, only probed; bit 35: it moved
  onto another source's URL and merged into it; bits 40-47: its consecutive 404s), ``etag``,
  ``modified`` (the ``Last-Modified`` of the last response, unix seconds; 0: none),
  ``alive_at`` (unix time of its last new entry, or of its first fetch); counters ``crawls``,
  ``errors``, ``new_items``, ``utility``;
  what the policy learned, in units a person reads (NULL when the policy learns no such
  thing): ``rate_per_hour`` (entries published per hour), ``half_life_hours`` (of readers'
  interest), ``mean_value`` (of an entry); and the machine state: ``policy_row`` (the
  policy's per-source numbers, a packed record whose layout is in ``policy_state``) and
  ``entries`` (64-bit hashes of the entries seen, oldest first);
* ``aliases(url, id)``: the URLs a source had before it moved (a permanent redirect), and
  those of a source merged into another: a list naming one finds source ``id``;
* ``source_blocks(id, block, data)``: per-source state that only some sources have;
* ``policy_state(policy, row_layout, global_state)``: the rest of what the policy learned;
* ``epochs``: per epoch, crawls, their cost, new entries, utility, errors, not modified;
  ``epoch_errors(epoch, kind, count)``: the errors of each epoch by kind;
  ``epoch_measures(epoch, missed_items, delay_seconds)``: the entries missed (estimated) and
  the sum of the discovery delays of each epoch, ``epoch_delays(epoch, bin, count)`` those
  delays per bin of :data:`scrapy_whittle.service.decisions.measures.EDGES`;
* ``publications(source, published, value)``: the publication time (unix seconds) of every
  dated entry found, with its value where its feed showed engagement (NULL otherwise), for
  ``WHITTLE_TRACE_DAYS`` days of publication (:mod:`scrapy_whittle.service.state.publications`);
* ``stories(story, source, seq)``: the stories seen across sources (``WHITTLE_DEDUP =
  "link"``), by the signed 64-bit hash of a story key, with the source that brought the
  story first and its place in the memory's order; ``story_sources(story, source)``: the
  other sources that listed it (a repeat: no item); both as bounded as the memory
  (:mod:`scrapy_whittle.service.memory.story_memory`);
* ``hosts(host, allowance, ceiling, throttles)``: the hosts throttled (they answered 429 or
  503, or a burst of 403s): crawls per epoch allowed now, the most they bore when they last
  objected, and the cuts so far (:mod:`scrapy_whittle.service.hosts.host_allowances`);
* ``websub``: the WebSub subscriptions, one row per callback (the columns of
  :class:`scrapy_whittle.service.sources.websub.Subscription`: source, topic, hub, callback key,
  secret, state, mode, times of the request and of the lease's end, lease, retry time,
  failures), rewritten whole when one changed;
* ``sitemap_children(child, parent, misses, listed_at, dropped)``: the child sitemaps of the
  sitemap indexes (both sources): the index that listed the child last, the index's fetches
  in a row that have not listed it since, when it was last listed (unix seconds), and
  whether it retired for that (:mod:`scrapy_whittle.service.sources.index_children`);
* ``sitemap_indexes(parent, partial, listed_at, awaiting)``: each sitemap index's last
  listing: whether it was read only in part (a 304 repeating it counts no miss), when it was
  read, and the child URLs it named that were not registered yet (a JSON list);
* ``article_prints(seq, source, print)``: with ``WHITTLE_NEAR_DUPLICATES``, the text
  fingerprints of the last articles (``print``: the 256-bit SimHash, 32 bytes big-endian),
  numbered in the order they were kept, with the source of each; as bounded as the
  comparison's ring (:mod:`scrapy_whittle.service.memory.article_stories`);
* the view ``feeds``: the readable columns of ``sources``, times as UTC dates.

So ``sqlite3 JOBDIR/whittle.sqlite "select url, rate_per_hour, half_life_hours from feeds
order by rate_per_hour desc limit 10"`` answers "what does the crawler think of my feeds".

Writes: a checkpoint is one transaction holding only what changed since the previous one.
The database is in WAL mode with ``synchronous=NORMAL``: a killed process (kill -9, OOM)
loses nothing committed; a power cut may lose the last checkpoints but never leaves a
damaged database. A missing file starts a fresh crawl; an empty, truncated, damaged or
foreign file is moved aside (``whittle.sqlite.corrupt-<UTC time>``), logged, and the crawl
starts fresh; a file written by a newer schema is refused (:class:`StoreError`), since
moving it aside would throw away what a newer version learned. A file of schema 1 is read
with its policy names translated (``SCHEMA_1_POLICY_NAMES``); a file of schema 1, 2 or 3 is
upgraded when opened for writing (schema 3 added the measures' tables and ``publications``,
empty until the crawl goes on; schema 4 ``aliases`` and ``alive_at``, which an upgraded
source starts with NULL: its clock of retirement starts at its next fetch, and ``stories``,
``story_sources`` and ``hosts``, empty until the crawl goes on; schema 5 ``websub``, empty;
schema 6 ``sitemap_children``, empty: an index's children are known again at its next
fetch; schema 7 ``sitemap_indexes``, empty: each index's is written at its next listing;
schema 8 ``article_prints``, empty: the near-duplicate comparison starts afresh), in one
transaction.
"""

from __future__ import annotations

import json
import logging
import math
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from scrapy_whittle.service.state.state_codec import StateDecodeError, decode, encode
from scrapy_whittle.service.state.storage import (
    LOAD_COLUMNS,
    NEW_COLUMNS,
    STATE_COLUMNS,
    Checkpoint,
    SavedState,
    StateStore,
    StoreError,
)

logger = logging.getLogger(__name__)

FILE_NAME = "whittle.sqlite"
SCHEMA_VERSION = 8

#: Schema 1 named the policies differently: its "whittle" is the oracle index policy
#: ("oracle"), its "adaptive-whittle" the learned one ("whittle").
SCHEMA_1_POLICY_NAMES = {"whittle": "oracle", "adaptive-whittle": "whittle"}
APPLICATION_ID = 0x57484954          # "WHIT": marks the file as ours

SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
CREATE TABLE sources (
    id INTEGER PRIMARY KEY,
    url TEXT NOT NULL UNIQUE,
    title TEXT, category TEXT, weight REAL, min_interval REAL,
    last_crawl REAL, retry_at REAL, failures INTEGER NOT NULL DEFAULT 0,
    flags INTEGER NOT NULL DEFAULT 0,
    etag TEXT, modified INTEGER NOT NULL DEFAULT 0,
    crawls INTEGER NOT NULL DEFAULT 0, errors INTEGER NOT NULL DEFAULT 0,
    new_items INTEGER NOT NULL DEFAULT 0, utility REAL NOT NULL DEFAULT 0,
    rate_per_hour REAL, half_life_hours REAL, mean_value REAL,
    policy_row BLOB, entries BLOB, alive_at REAL
);
CREATE TABLE source_blocks (id INTEGER NOT NULL, block TEXT NOT NULL, data BLOB NOT NULL,
                            PRIMARY KEY (id, block)) WITHOUT ROWID;
CREATE TABLE policy_state (policy TEXT PRIMARY KEY, row_layout TEXT NOT NULL,
                           global_state BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE epochs (epoch INTEGER PRIMARY KEY, crawls INTEGER NOT NULL, cost REAL NOT NULL,
                     new_items INTEGER NOT NULL, utility REAL NOT NULL,
                     errors INTEGER NOT NULL, not_modified INTEGER NOT NULL);
CREATE TABLE epoch_errors (epoch INTEGER NOT NULL, kind TEXT NOT NULL, count INTEGER NOT NULL,
                           PRIMARY KEY (epoch, kind)) WITHOUT ROWID;
CREATE VIEW feeds AS
    SELECT id, url, title, category, rate_per_hour, half_life_hours, mean_value,
           crawls, new_items, utility, errors, failures,
           (flags >> 33) & 1 AS left_list, (flags >> 34) & 1 AS retired,
           (flags >> 35) & 1 AS merged,
           datetime(last_crawl, 'unixepoch') AS last_crawl_utc,
           CASE WHEN retry_at > 0 THEN datetime(retry_at, 'unixepoch') END AS retry_at_utc,
           etag, CASE WHEN modified > 0 THEN datetime(modified, 'unixepoch') END
               AS last_modified_utc
    FROM sources;
"""

#: what schema 3 added (so a file of schema 2 is upgraded by these alone)
SCHEMA_3 = (
    """CREATE TABLE IF NOT EXISTS epoch_measures (
           epoch INTEGER PRIMARY KEY, missed_items REAL NOT NULL, delay_seconds REAL NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS epoch_delays (
           epoch INTEGER NOT NULL, bin INTEGER NOT NULL, count INTEGER NOT NULL,
           PRIMARY KEY (epoch, bin)) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS publications (
           source INTEGER NOT NULL, published REAL NOT NULL, value REAL)""",
    # the retention's DELETE reads this index alone
    "CREATE INDEX IF NOT EXISTS publications_by_time ON publications (published)",
)

#: what schema 4 added: the moved sources' old URLs, each source's last sign of life, the
#: view showing the retired and merged sources, and the stories seen across sources
SCHEMA_4 = (
    "CREATE TABLE IF NOT EXISTS aliases (url TEXT PRIMARY KEY, id INTEGER NOT NULL)",
    "ALTER TABLE sources ADD COLUMN alive_at REAL",
    "DROP VIEW IF EXISTS feeds",
    SCHEMA[SCHEMA.index("CREATE VIEW feeds"):].strip().rstrip(";"),
    """CREATE TABLE IF NOT EXISTS stories (
           story INTEGER PRIMARY KEY, source INTEGER NOT NULL, seq INTEGER NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS story_sources (
           story INTEGER NOT NULL, source INTEGER NOT NULL,
           PRIMARY KEY (story, source)) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS hosts (
           host TEXT PRIMARY KEY, allowance REAL NOT NULL, ceiling REAL,
           throttles INTEGER NOT NULL) WITHOUT ROWID""",
)

#: what schema 5 added: the WebSub subscriptions (:mod:`scrapy_whittle.service.sources.websub`)
SCHEMA_5 = (
    """CREATE TABLE IF NOT EXISTS websub (
           source INTEGER NOT NULL, topic TEXT NOT NULL, hub TEXT NOT NULL,
           key TEXT PRIMARY KEY, secret TEXT NOT NULL, state TEXT NOT NULL,
           mode TEXT NOT NULL, requested_at REAL, lease_seconds REAL, expires_at REAL,
           retry_at REAL, failures INTEGER NOT NULL) WITHOUT ROWID""",
)

#: what schema 6 added: the child sitemaps of the sitemap indexes
#: (:mod:`scrapy_whittle.service.sources.index_children`)
SCHEMA_6 = (
    """CREATE TABLE IF NOT EXISTS sitemap_children (
           child INTEGER PRIMARY KEY, parent INTEGER NOT NULL, misses INTEGER NOT NULL,
           listed_at REAL NOT NULL, dropped INTEGER NOT NULL)""",
)

#: what schema 7 added: each sitemap index's last listing
#: (:mod:`scrapy_whittle.service.sources.index_children`)
SCHEMA_7 = (
    """CREATE TABLE IF NOT EXISTS sitemap_indexes (
           parent INTEGER PRIMARY KEY, partial INTEGER NOT NULL, listed_at REAL NOT NULL,
           awaiting TEXT NOT NULL)""",
)

#: what schema 8 added: the text fingerprints of the last articles
#: (:mod:`scrapy_whittle.service.memory.article_stories`)
SCHEMA_8 = (
    """CREATE TABLE IF NOT EXISTS article_prints (
           seq INTEGER PRIMARY KEY, source INTEGER NOT NULL, print BLOB NOT NULL)""",
)

#: the columns of ``websub``, in the order of a subscription's row
#: (:class:`scrapy_whittle.service.sources.websub.Subscription`'s fields)
WEBSUB_COLUMNS = ("source", "topic", "hub", "key", "secret", "state", "mode", "requested_at",
                  "lease_seconds", "expires_at", "retry_at", "failures")


class SqliteStateStore(StateStore):
    """One crawl's SQLite state file (see the module docstring): the :class:`StateStore`
    of one process."""

    schema_version = SCHEMA_VERSION     # of the file opened

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self.moved_aside: Path | None = None
        self._db = self._open()

    # -- opening ----------------------------------------------------------------------------
    @classmethod
    def in_jobdir(cls, jobdir: str | Path) -> SqliteStateStore:
        return cls(Path(jobdir) / FILE_NAME)

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            try:
                return self._upgrade(self._check(self._connect()))
            except (sqlite3.DatabaseError, _Foreign) as exc:
                self._move_aside(exc)
        db = self._connect()
        with db:
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            db.executescript(SCHEMA)
            # SCHEMA has every column: of the upgrades, the tables it lacks
            for statement in SCHEMA_3 + SCHEMA_4 + SCHEMA_5 + SCHEMA_6 + SCHEMA_7 + SCHEMA_8:
                if "ADD COLUMN" not in statement:
                    db.execute(statement)
            db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
        return db

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")
        return db

    def _check(self, db: sqlite3.Connection) -> sqlite3.Connection:
        try:
            if self.path.stat().st_size == 0:
                raise _Foreign("the file is empty")
            app = db.execute("PRAGMA application_id").fetchone()[0]
            if app != APPLICATION_ID:
                raise _Foreign(f"not a scrapy-whittle state file (application_id {app})")
            ok = db.execute("PRAGMA quick_check").fetchone()[0]
            if ok != "ok":
                raise _Foreign(f"damaged: {ok}")
            row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            version = int(row[0]) if row is not None else None
        except Exception:
            db.close()
            raise
        if version is None:
            db.close()
            raise _Foreign("no schema version")
        if version > SCHEMA_VERSION:
            db.close()
            raise StoreError(
                f"{self.path} was written by a newer scrapy-whittle (state schema {version}, "
                f"this version reads up to {SCHEMA_VERSION}): upgrade scrapy-whittle, or "
                f"point JOBDIR elsewhere to start a new crawl")
        self.schema_version = version
        return db

    def _upgrade(self, db: sqlite3.Connection) -> sqlite3.Connection:
        """Rewrite a file of an older schema as the current one (one transaction)."""
        if self.schema_version == SCHEMA_VERSION:
            return db
        db.execute("BEGIN IMMEDIATE")
        try:
            if self.schema_version < 2:
                policy = db.execute("SELECT value FROM meta WHERE key = 'policy'").fetchone()
                if policy is not None:
                    db.execute("UPDATE meta SET value = ? WHERE key = 'policy'",
                               (SCHEMA_1_POLICY_NAMES.get(policy[0], policy[0]),))
                row = db.execute("SELECT policy, row_layout, global_state FROM policy_state"
                                 ).fetchone()
                if row is not None:
                    db.execute("DELETE FROM policy_state")
                    db.execute("INSERT INTO policy_state VALUES (?, ?, ?)",
                               _schema_1_policy_row(row))
            for statement in SCHEMA_3:
                db.execute(statement)
            columns = {r[1] for r in db.execute("PRAGMA table_info(sources)")}
            for statement in SCHEMA_4:
                if not ("alive_at" in columns and "ADD COLUMN alive_at" in statement):
                    db.execute(statement)
            for statement in SCHEMA_5 + SCHEMA_6 + SCHEMA_7 + SCHEMA_8:
                db.execute(statement)
            db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                       (SCHEMA_VERSION,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            db.close()
            raise
        self.schema_version = SCHEMA_VERSION
        return db

    def _move_aside(self, exc: BaseException) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        for suffix in ("", "-wal", "-shm"):
            part = Path(f"{self.path}{suffix}")
            if part.exists():
                part.replace(Path(f"{target}{suffix}"))
        self.moved_aside = target
        logger.error("The crawl state %s cannot be read (%s): moved aside to %s; the crawl "
                     "starts with nothing learned", self.path, exc, target.name)

    # -- reading ----------------------------------------------------------------------------
    def load(self) -> SavedState | None:
        """Everything stored, or None for a fresh store."""
        with self._lock:
            db = self._db
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
            old = self.schema_version < 4        # a read-only file of an older schema
            columns = [("NULL" if old and c == "alive_at" else c) for c in LOAD_COLUMNS]
            rows = db.execute(f"SELECT {', '.join(columns)} FROM sources "
                              "ORDER BY id").fetchall()
            if not rows and "origin" not in meta:
                return None
            columns = list(zip(*rows, strict=True)) or [() for _ in LOAD_COLUMNS]
            del rows
            blocks = db.execute("SELECT id, block, data FROM source_blocks").fetchall()
            row = db.execute("SELECT policy, row_layout, global_state FROM policy_state"
                             ).fetchone()
            epochs = db.execute("SELECT epoch, crawls, cost, new_items, utility, errors, "
                                "not_modified FROM epochs ORDER BY epoch").fetchall()
            aliases = [] if old else db.execute("SELECT url, id FROM aliases").fetchall()
            hosts = [] if old else [
                (host, allowance, math.inf if ceiling is None else ceiling, throttles)
                for host, allowance, ceiling, throttles in db.execute(
                    "SELECT host, allowance, ceiling, throttles FROM hosts")]
            websub = [] if self.schema_version < 5 else db.execute(
                f"SELECT {', '.join(WEBSUB_COLUMNS)} FROM websub").fetchall()
            children = [] if self.schema_version < 6 else db.execute(
                "SELECT child, parent, misses, listed_at, dropped FROM sitemap_children"
            ).fetchall()
            indexes = [] if self.schema_version < 7 else [
                (parent, partial, listed_at, _urls(awaiting))
                for parent, partial, listed_at, awaiting in db.execute(
                    "SELECT parent, partial, listed_at, awaiting FROM sitemap_indexes")]
        if self.schema_version < 2:      # a read-only file of schema 1
            meta["policy"] = SCHEMA_1_POLICY_NAMES.get(meta.get("policy"), meta.get("policy"))
            row = _schema_1_policy_row(row) if row is not None else None
        return SavedState(meta=meta, sources=dict(zip(LOAD_COLUMNS, columns, strict=True)),
                          blocks=blocks, policy=row, epochs=epochs, aliases=aliases,
                          hosts=hosts, websub=websub, sitemap_children=children,
                          sitemap_indexes=indexes)

    # -- writing ----------------------------------------------------------------------------
    def write(self, cp: Checkpoint) -> None:
        """Commit one checkpoint in one transaction (thread-safe; may run off the reactor)."""
        set_cols = ", ".join(f"{c} = ?" for c in STATE_COLUMNS)
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                if cp.n_new:
                    db.executemany(
                        f"INSERT OR IGNORE INTO sources ({', '.join(NEW_COLUMNS)}) "
                        f"VALUES ({', '.join('?' * len(NEW_COLUMNS))})", cp.new_sources())
                if cp.n_changed:
                    db.executemany(f"UPDATE sources SET {set_cols} WHERE id = ?",
                                   cp.source_rows())
                if cp.moves:
                    db.executemany("UPDATE sources SET url = ? WHERE id = ?",
                                   [(url, sid) for sid, url in cp.moves])
                if cp.aliases:
                    db.executemany("INSERT OR REPLACE INTO aliases VALUES (?, ?)", cp.aliases)
                if cp.hosts is not None:
                    db.execute("DELETE FROM hosts")
                    db.executemany("INSERT INTO hosts VALUES (?, ?, ?, ?)",
                                   [(h, a, c if math.isfinite(c) else None, t)
                                    for h, a, c, t in cp.hosts])
                if cp.websub is not None:
                    db.execute("DELETE FROM websub")
                    db.executemany(
                        f"INSERT INTO websub ({', '.join(WEBSUB_COLUMNS)}) "
                        f"VALUES ({', '.join('?' * len(WEBSUB_COLUMNS))})", cp.websub)
                if cp.sitemap_children:
                    db.executemany("INSERT OR REPLACE INTO sitemap_children "
                                   "VALUES (?, ?, ?, ?, ?)", cp.sitemap_children)
                if cp.sitemap_indexes:
                    db.executemany("INSERT OR REPLACE INTO sitemap_indexes VALUES (?, ?, ?, ?)",
                                   [(p, partial, at, json.dumps(list(urls), ensure_ascii=False))
                                    for p, partial, at, urls in cp.sitemap_indexes])
                if cp.blocks:
                    db.executemany("INSERT OR REPLACE INTO source_blocks VALUES (?, ?, ?)",
                                   cp.blocks)
                if cp.policy is not None:
                    db.execute("DELETE FROM policy_state")
                    db.execute("INSERT INTO policy_state VALUES (?, ?, ?)", cp.policy)
                if cp.epochs:          # added to what the epochs already hold
                    db.executemany(
                        "INSERT INTO epochs VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(epoch) "
                        "DO UPDATE SET crawls = crawls + excluded.crawls, "
                        "cost = cost + excluded.cost, new_items = new_items + "
                        "excluded.new_items, utility = utility + excluded.utility, "
                        "errors = errors + excluded.errors, "
                        "not_modified = not_modified + excluded.not_modified", cp.epochs)
                if cp.epoch_errors:
                    db.executemany(
                        "INSERT INTO epoch_errors VALUES (?, ?, ?) ON CONFLICT(epoch, kind) "
                        "DO UPDATE SET count = count + excluded.count", cp.epoch_errors)
                if cp.epoch_measures:
                    db.executemany(
                        "INSERT INTO epoch_measures VALUES (?, ?, ?) ON CONFLICT(epoch) DO "
                        "UPDATE SET missed_items = missed_items + excluded.missed_items, "
                        "delay_seconds = delay_seconds + excluded.delay_seconds",
                        cp.epoch_measures)
                if cp.epoch_delays:
                    db.executemany(
                        "INSERT INTO epoch_delays VALUES (?, ?, ?) ON CONFLICT(epoch, bin) "
                        "DO UPDATE SET count = count + excluded.count", cp.epoch_delays)
                if cp.stories:
                    db.executemany("INSERT OR REPLACE INTO stories VALUES (?, ?, ?)",
                                   cp.stories)
                if cp.stories_gone:
                    db.executemany("DELETE FROM stories WHERE story = ?", cp.stories_gone)
                    db.executemany("DELETE FROM story_sources WHERE story = ?",
                                   cp.stories_gone)
                if cp.story_sources:
                    db.executemany("INSERT OR IGNORE INTO story_sources VALUES (?, ?)",
                                   cp.story_sources)
                if cp.article_prints:
                    db.executemany("INSERT OR REPLACE INTO article_prints VALUES (?, ?, ?)",
                                   cp.article_prints)
                if cp.article_prints_from > 0:
                    db.execute("DELETE FROM article_prints WHERE seq < ?",
                               (cp.article_prints_from,))
                if cp.n_publications:
                    db.executemany("INSERT INTO publications VALUES (?, ?, ?)",
                                   cp.publications())
                if cp.publications_since is not None:
                    db.execute("DELETE FROM publications WHERE published < ?",
                               (cp.publications_since,))
                meta = {**cp.meta, "checkpoint_at": cp.taken_at}
                db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                               [(k, _meta_value(v)) for k, v in meta.items()])
                db.execute("UPDATE meta SET value = value + 1 WHERE key = 'checkpoint_seq'")
                db.execute("INSERT OR IGNORE INTO meta VALUES ('checkpoint_seq', 1)")
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def stories(self) -> list[tuple[int, int, int]]:
        """The stories seen across sources: (story hash, first source, seq) rows (none in a
        read-only file of an older schema)."""
        if self.schema_version < 4:
            return []
        with self._lock:
            return self._db.execute("SELECT story, source, seq FROM stories").fetchall()

    def article_prints(self) -> list[tuple[int, int, bytes]]:
        """The text fingerprints of the last articles: (seq, source, print) rows (none in a
        file of an older schema)."""
        if self.schema_version < 8:
            return []
        with self._lock:
            return self._db.execute("SELECT seq, source, print FROM article_prints").fetchall()

    def close(self) -> None:
        with self._lock:
            try:
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error:          # pragma: no cover  (best effort)
                pass
            self._db.close()


class _Foreign(Exception):
    """The file is not a usable scrapy-whittle store (moved aside)."""


def _schema_1_policy_row(row: tuple) -> tuple:
    """A ``policy_state`` row of schema 1 with the policy's current name, in the row and in
    its global state (left as it is where that cannot be decoded: the restore reports it)."""
    name, layout, blob = row
    renamed = SCHEMA_1_POLICY_NAMES.get(name, name)
    try:
        state = decode(blob)
    except StateDecodeError:
        return renamed, layout, blob
    if isinstance(state, dict) and "policy" in state:
        state["policy"] = SCHEMA_1_POLICY_NAMES.get(state["policy"], state["policy"])
        blob = encode(state)
    return renamed, layout, blob


def _urls(text: str) -> tuple[str, ...]:
    """A ``sitemap_indexes.awaiting`` value read back (a damaged one: none, logged)."""
    try:
        urls = json.loads(text)
        if isinstance(urls, list) and all(isinstance(u, str) for u in urls):
            return tuple(urls)
    except (TypeError, ValueError):
        pass
    logger.warning("a damaged sitemap index's row: its children awaiting registration are "
                   "forgotten (%.100r)", text)
    return ()


def _meta_value(v: Any) -> Any:
    return v if isinstance(v, int | float | str | bytes) or v is None else json.dumps(v)
