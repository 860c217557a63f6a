"""What a crawl's state file says, for people: read ``JOBDIR/whittle.sqlite`` without writing.

:func:`load_report` opens the state store read-only (a crawl may be running: SQLite's WAL
lets it read the last committed checkpoint), reads the per-source rows, the per-epoch
aggregates and errors, and rebuilds the re-crawl service from the store exactly as a resumed
crawl would (same policy, budget and period, from the store's ``meta``), on a clock stopped
at the last checkpoint, and the users' measures of the whole crawl (:class:`CrawlMeasures`,
from the epochs' tables). From that copy it asks the policy for its ranking now (the "current
index": ``policy.priority(epoch)``, None for a policy that does not rank) and for its choice
at the start of the next epoch (``policy.select``), among the sources eligible then. The copy
is thrown away: nothing is written to the store.
"""

from __future__ import annotations

import math
import sqlite3
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from scrapy_whittle.core.bound import bound_curve
from scrapy_whittle.core.dynamics import alpha_u
from scrapy_whittle.service.clock import SimulatedClock
from scrapy_whittle.service.config import (
    DEFAULTS,
    SETTING,
    InvalidSetting,
    WhittleConfig,
    download_slot_delays,
)
from scrapy_whittle.service.decisions.measures import DelayHistogram
from scrapy_whittle.service.state.store import FILE_NAME, SqliteStateStore, StoreError

#: columns of the ``sources`` table the report shows, in this order
SOURCE_COLUMNS = ("id", "url", "title", "rate_per_hour", "half_life_hours", "mean_value",
                  "crawls", "errors", "failures", "new_items", "utility", "last_crawl",
                  "retry_at", "flags")
EPOCH_COLUMNS = ("epoch", "crawls", "cost", "new_items", "utility", "errors", "not_modified")
#: the WHITTLE_* settings of the project that may shape the rebuilt policy (the rest, budget,
#: period and policy, come from the store)
PROJECT_SETTINGS = ("WHITTLE_POLICY_OPTIONS", "WHITTLE_ORACLE_PARAMS", "WHITTLE_SEED",
                    "WHITTLE_HALF_LIFE", "WHITTLE_MAX_ENTRIES_PER_SOURCE")


class ReportError(Exception):
    """The state file cannot be read; the message says which and why."""


class ReadOnlyStore(SqliteStateStore):
    """A state store opened read-only: never created, repaired, moved aside or written."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self.moved_aside = None
        if not self.path.is_file():
            raise ReportError(f"{self.path}: no crawl state here (a crawl with JOBDIR set "
                              f"writes {FILE_NAME} in that directory)")
        # immutable=1 when no write-ahead log exists (the crawl closed cleanly): SQLite then
        # creates no -shm / -wal file beside it
        live = Path(f"{self.path}-wal").exists()
        #: whether the crawl may still be running (its write-ahead log is there: running,
        #: or killed); False once it closed cleanly
        self.live = live
        uri = f"{self.path.resolve().as_uri()}?mode=ro{'' if live else '&immutable=1'}"
        try:
            self._db = self._check(sqlite3.connect(uri, uri=True, check_same_thread=False))
        except StoreError as exc:
            raise ReportError(str(exc)) from None
        except Exception as exc:           # damaged, foreign, not SQLite
            raise ReportError(f"{self.path} cannot be read: {exc}") from None

    def rows(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def has_table(self, name: str) -> bool:
        """Whether the file has table ``name`` (an older schema lacks the newer ones: it is
        read as it is, never upgraded)."""
        return bool(self.rows("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                              (name,)))

    def write(self, cp) -> None:
        raise StoreError(f"{self.path} is open read-only")

    def close(self) -> None:
        with self._lock:
            self._db.close()


@dataclass
class CrawlMeasures:
    """The users' measures of the whole crawl (all its runs), from the epochs' tables:
    ``crawls``, ``captured`` (new entries), ``missed`` (entries lost to full feed windows,
    estimated; NaN in a state file written before they were kept) and ``delays`` (the
    discovery delays of the entries re-crawls captured,
    :mod:`scrapy_whittle.service.decisions.measures`; None in such a file)."""

    crawls: int
    captured: int
    missed: float = math.nan
    delays: DelayHistogram | None = None

    @property
    def crawls_per_item(self) -> float:
        return self.crawls / self.captured if self.captured else math.nan


@dataclass
class BudgetCurve:
    """The upper bound on the value any policy captures (core.bound) at a range of budgets,
    from the parameters the crawl learned, as a share of the value available: what crawling
    every learned source with value every epoch captures (at the budget ``saturation``).

    ``budgets`` (cost units per period, ascending) are the crawl's budget times powers of
    sqrt(2), from an eighth of it to ``saturation``, with ``current`` (the crawl's budget)
    and ``saturation`` among them; ``shares`` the bound at each. Empty, with ``message``
    saying why, when no source has learned parameters or none has value."""

    budgets: np.ndarray
    shares: np.ndarray
    current: float
    saturation: float = math.nan
    sources: int = 0          # the sources in the curve: learned parameters, still listed
    left_out: int = 0         # the others (never fetched successfully, or left the list)
    message: str = ""

    def __bool__(self) -> bool:
        return bool(self.budgets.size)

    def share_at(self, budget: float) -> float:
        """The share at one of ``budgets`` (NaN at a budget the curve does not hold)."""
        hit = np.flatnonzero(np.isclose(self.budgets, budget, rtol=1e-9, atol=0.0))
        return float(self.shares[hit[0]]) if hit.size else math.nan


@dataclass
class CrawlReport:
    """A crawl's state as of ``at`` (unix time; the last checkpoint by default)."""

    path: Path
    meta: dict[str, Any]
    at: float
    origin: float
    period: float
    budget: float
    policy: str
    #: per source (id order): each of SOURCE_COLUMNS, plus ``index`` (float, NaN when the
    #: policy does not rank), ``planned`` (bool: chosen for the next epoch) and
    #: ``not_before`` (unix time before which the source may not be fetched) and ``cost``
    #: (C_i, budget units a crawl uses; 1 where the policy could not be rebuilt)
    sources: dict[str, np.ndarray]
    #: per epoch with a crawl: each of EPOCH_COLUMNS
    epochs: dict[str, np.ndarray]
    #: error kind -> count per epoch (aligned with ``epochs["epoch"]``)
    errors: dict[str, np.ndarray]
    ranks: bool = False
    #: why there is no index or plan (empty when there is)
    no_plan: str = ""
    #: the epoch of the next selection and when it is made (``planned`` is its choice)
    plan_epoch: int = -1
    plan_at: float = math.nan
    notes: list[str] = field(default_factory=list)
    measures: CrawlMeasures = field(default_factory=lambda: CrawlMeasures(0, 0))
    budget_curve: BudgetCurve | None = None
    #: (old URL, id) of the sources that moved, and of those merged into another
    aliases: list[tuple[str, int]] = field(default_factory=list)
    #: (host, allowance now, ceiling, cuts) of each throttled host (the ``hosts`` table)
    hosts: list[tuple[str, float, float | None, int]] = field(default_factory=list)
    #: the project's ``WHITTLE_HOST_LIMITS`` (host -> crawls per epoch; empty: none or
    #: unreadable)
    host_limits: dict[str, float] = field(default_factory=dict)
    #: the project's host delays: ``DOWNLOAD_SLOTS`` (host -> seconds) and ``DOWNLOAD_DELAY``
    #: (every other host's); each is an allowance of floor(T / delay) crawls per epoch
    slot_delays: dict[str, float] = field(default_factory=dict)
    download_delay: float = 0.0
    #: the crawl may still be running (or was killed): its last epoch may not be over; False
    #: once it closed cleanly
    live: bool = True

    def moved(self) -> dict[int, list[str]]:
        """id -> the URLs it had before, of every source that moved (not merged ones)."""
        merged = (self.sources["flags"].astype(np.int64) >> 35) & 1
        out: dict[int, list[str]] = {}
        for url, sid in self.aliases:
            if 0 <= sid < self.n and not merged[sid] and url != self.sources["url"][sid]:
                out.setdefault(int(sid), []).append(url)
        return out

    def retired(self) -> int:
        return int(((self.sources["flags"].astype(np.int64) >> 34) & 1).sum())

    @property
    def n(self) -> int:
        return len(self.sources["id"])

    @property
    def learned(self) -> np.ndarray:
        """bool per source: fetched successfully at least once (else the learned columns
        hold only the policy's priors)."""
        return self.sources["crawls"] > self.sources["errors"]

    @property
    def epoch(self) -> int:
        return math.floor((self.at - self.origin) / self.period)

    def completed_budget_use(self) -> float | None:
        """Cost crawled / budget over the epochs with crawls, the current one left out."""
        done = self.epochs["epoch"] < self.epoch
        if not done.any():
            return None
        return float(self.epochs["cost"][done].sum() / (self.budget * done.sum()))


def load_report(jobdir_or_file: str | Path, *, settings: Mapping[str, Any] | None = None,
                at: float | None = None) -> CrawlReport:
    """Read a crawl's state (``JOBDIR`` or the ``whittle.sqlite`` in it). ``settings``: the
    project's settings (PROJECT_SETTINGS and ``DOWNLOAD_SLOTS`` are used to rebuild the
    policy as the crawl would); ``at``: the time to describe (default the last checkpoint)."""
    store = ReadOnlyStore(state_path(jobdir_or_file))
    try:
        return _read(store, settings or {}, at)
    finally:
        store.close()


def _host_limits(settings: Mapping[str, Any]) -> dict[str, float]:
    """The project's host limits; none where the setting is unreadable (the crawl itself
    refuses it, with its message)."""
    try:
        return SETTING["WHITTLE_HOST_LIMITS"].read(settings) or {}
    except InvalidSetting:
        return {}


def _slot_delays(settings: Mapping[str, Any]) -> dict[str, float]:
    """The project's ``DOWNLOAD_SLOTS`` delays; none where unreadable."""
    try:
        return download_slot_delays(settings)
    except InvalidSetting:
        return {}


def _crawl_delay(meta: Mapping[str, Any], settings: Mapping[str, Any]) -> float:
    """The ``DOWNLOAD_DELAY`` the crawl ran with (its store's meta: a ``-s`` on the command
    line included), else the project's."""
    try:
        value = float(meta["download_delay"])
    except (KeyError, TypeError, ValueError):
        return _download_delay(settings)
    return value if math.isfinite(value) and value > 0 else 0.0


def _download_delay(settings: Mapping[str, Any]) -> float:
    """The project's ``DOWNLOAD_DELAY`` (every host's delay, hence its allowance); 0 where
    it is unreadable (the crawl itself refuses it)."""
    getfloat = getattr(settings, "getfloat", None)
    try:
        value = float(getfloat("DOWNLOAD_DELAY") if getfloat
                      else settings.get("DOWNLOAD_DELAY", 0) or 0)
    except (TypeError, ValueError):
        return 0.0
    return value if math.isfinite(value) and value > 0 else 0.0


def state_path(jobdir_or_file: str | Path) -> Path:
    """The state file of a JOBDIR (or the file itself)."""
    path = Path(jobdir_or_file)
    return path / FILE_NAME if path.is_dir() else path


def _read(store: ReadOnlyStore, settings: Mapping[str, Any], at: float | None) -> CrawlReport:
    meta = dict(store.rows("SELECT key, value FROM meta"))
    if "origin" not in meta:
        raise ReportError(f"{store.path}: no checkpoint written yet (the crawl has just "
                          "started, or stopped before its first checkpoint)")
    at = float(meta.get("checkpoint_at", meta["origin"]) if at is None else at)
    rows = store.rows(f"SELECT {', '.join(SOURCE_COLUMNS)} FROM sources ORDER BY id")
    sources = _columns(SOURCE_COLUMNS, rows)
    epochs = _columns(EPOCH_COLUMNS, store.rows(
        f"SELECT {', '.join(EPOCH_COLUMNS)} FROM epochs ORDER BY epoch"))
    errors: dict[str, np.ndarray] = {}
    position = {int(k): i for i, k in enumerate(epochs["epoch"])}
    for epoch, kind, count in store.rows("SELECT epoch, kind, count FROM epoch_errors"):
        if int(epoch) in position:
            errors.setdefault(kind, np.zeros(len(position), dtype=np.int64))
            errors[kind][position[int(epoch)]] += int(count)
    report = CrawlReport(
        path=store.path, meta=meta, at=at, origin=float(meta["origin"]),
        period=float(meta["period"]), budget=float(meta["budget"]),
        policy=str(meta.get("policy", "?")), sources=sources, epochs=epochs,
        errors=dict(sorted(errors.items(), key=lambda kv: -int(kv[1].sum()))),
        measures=_measures(store, epochs),
        aliases=(store.rows("SELECT url, id FROM aliases") if store.has_table("aliases")
                 else []),
        hosts=(store.rows("SELECT host, allowance, ceiling, throttles FROM hosts ORDER BY "
                          "host") if store.has_table("hosts") else []),
        host_limits=_host_limits(settings), slot_delays=_slot_delays(settings),
        download_delay=_crawl_delay(meta, settings), live=store.live)
    n = report.n
    report.sources["index"] = np.full(n, np.nan)
    report.sources["planned"] = np.zeros(n, dtype=bool)
    report.sources["not_before"] = np.maximum(
        _float(sources["retry_at"]), np.zeros(n))
    report.sources["cost"] = np.ones(n)
    if n:
        _plan(report, store, settings)
    report.budget_curve = budget_curve(report)
    return report


#: flags bit 33: the source left the WHITTLE_SOURCES list and is no longer crawled
LEFT_THE_LIST = 1 << 33


def budget_curve(report: CrawlReport) -> BudgetCurve:
    """The bound against the budget for the sources the crawl learned (see
    :class:`BudgetCurve`); from the learned columns, so any policy that stores them has one."""
    s = report.sources
    rate = np.asarray(s["rate_per_hour"], dtype=np.float64)
    value = np.asarray(s["mean_value"], dtype=np.float64)
    half_life = np.asarray(s["half_life_hours"], dtype=np.float64)
    listed = (s["flags"] & LEFT_THE_LIST) == 0
    known = report.learned & listed & np.isfinite(rate) & np.isfinite(value)
    empty = BudgetCurve(np.zeros(0), np.zeros(0), report.budget, left_out=report.n)
    if not report.n:
        return _no_curve(empty, "the crawl has no sources yet")
    if not known.any():
        if not np.isfinite(rate).any():
            return _no_curve(empty, f"policy {report.policy!r} learns no publishing rates")
        return _no_curve(empty, "no source has been fetched successfully yet")
    # a learned half-life is stored only when finite: none means the value never decays
    decay = np.where(np.isfinite(half_life) & (half_life > 0), math.log(2.0) / half_life, 0.0)
    hours = report.period / 3600.0
    alpha, u = alpha_u(np.maximum(rate, 0.0) * np.maximum(value, 0.0), decay, hours)
    alpha, u, cost = alpha[known], u[known], s["cost"][known]
    found = bound_curve(alpha, u, [], cost)          # the value available, and where
    saturation = found.saturation if found.available > 0 else 0.0
    if not saturation > 0:
        return _no_curve(empty, "the sources learned publish nothing of value yet")
    # powers of sqrt(2) of the crawl's budget, from an eighth of it to where value saturates
    top = max(saturation, report.budget)
    k = np.arange(-6, math.floor(2 * math.log2(top / report.budget)) + 1)
    grid = report.budget * 2.0 ** (k / 2.0)
    grid = np.concatenate([grid[grid < top * (1 - 1e-9)], [saturation, report.budget]])
    curve = bound_curve(alpha, u, grid, cost)
    return BudgetCurve(curve.budgets, curve.shares, report.budget, curve.saturation,
                       sources=int(known.sum()), left_out=int(report.n - known.sum()))


def _no_curve(empty: BudgetCurve, why: str) -> BudgetCurve:
    empty.message = f"no budget curve: {why}"
    return empty


def _measures(store: ReadOnlyStore, epochs: dict[str, np.ndarray]) -> CrawlMeasures:
    measures = CrawlMeasures(crawls=int(epochs["crawls"].sum()),
                             captured=int(epochs["new_items"].sum()))
    if store.has_table("epoch_measures") and store.has_table("epoch_delays"):
        missed, seconds = store.rows("SELECT total(missed_items), total(delay_seconds) "
                                     "FROM epoch_measures")[0]
        measures.missed = float(missed)
        measures.delays = DelayHistogram.from_rows(
            store.rows("SELECT bin, sum(count) FROM epoch_delays GROUP BY bin"), seconds)
    return measures


def _columns(names: tuple[str, ...], rows: list[tuple]) -> dict[str, np.ndarray]:
    cols = list(zip(*rows, strict=True)) if rows else [() for _ in names]
    out = {}
    for name, values in zip(names, cols, strict=True):
        if name in ("url", "title"):
            out[name] = np.array([v or "" for v in values], dtype=object)
        elif name in ("id", "epoch", "crawls", "errors", "failures", "new_items",
                      "not_modified", "flags"):
            out[name] = np.array([v or 0 for v in values], dtype=np.int64)
        else:
            out[name] = _float(values)
    return out


def _float(values) -> np.ndarray:
    return np.array([math.nan if v is None else float(v) for v in values], dtype=np.float64)


def _plan(report: CrawlReport, store: ReadOnlyStore, settings: Mapping[str, Any]) -> None:
    """Rebuild the service from the store on a stopped clock; ask its policy for the index now
    and the plan of the next epoch."""
    from scrapy_whittle.core.policies import canonical_name, policy_class
    from scrapy_whittle.service.recrawl import RecrawlService
    from scrapy_whittle.service.sources.registry import load_oracle

    core = report.policy
    given = {k: settings.get(k) for k in PROJECT_SETTINGS if settings.get(k) is not None}
    project_policy = settings.get("WHITTLE_POLICY") or DEFAULTS["WHITTLE_POLICY"]
    if canonical_name(project_policy) != core:
        given.pop("WHITTLE_POLICY_OPTIONS", None)      # options of another policy
    try:
        step = report.meta.get("step")          # (a state file of before it was kept: the
        if step is not None:                      # project's, or the default)
            given["WHITTLE_STEP"] = float(step)
        config = WhittleConfig.from_settings({
            **given, "WHITTLE_POLICY": core, "WHITTLE_BUDGET": report.budget,
            "WHITTLE_PERIOD": report.period, "WHITTLE_CLOCK": SimulatedClock(start=report.at),
            "WHITTLE_STATE": True})
        oracle = (load_oracle(config.oracle_params)
                  if policy_class(config.core_policy).needs_parameters else None)
        slot_delays = download_slot_delays(settings)
    except InvalidSetting as exc:
        report.no_plan = (f"the policy {core!r} cannot be rebuilt from the state file alone: "
                          f"{exc}")
        return
    service = RecrawlService(config, store=store, oracle=oracle, slot_delays=slot_delays,
                             download_delay=_download_delay(settings))
    try:
        service.open([])
    except (InvalidSetting, StoreError, ValueError) as exc:
        report.no_plan = f"the policy {core!r} cannot be rebuilt: {exc}"
        return
    if len(service.sources) != report.n:       # a checkpoint landed between the two reads
        report.notes.append("the crawl wrote a checkpoint while the report read it: the "
                            "index and plan are from the newer one")
    n = min(report.n, len(service.sources))
    # the next selection: of the current epoch if it has not dispatched anything yet (a
    # stopped crawl resumes with it), else of the next one, at its start
    k = report.epoch
    started = k in set(report.epochs["epoch"].tolist())
    report.plan_epoch = k + 1 if started else k
    report.plan_at = report.origin + (k + 1) * report.period if started else report.at
    eligible = service.sources.eligible(report.plan_at, set())
    chosen = np.asarray(service.policy.select(report.plan_epoch, report.budget,
                                              None if eligible.all() else eligible),
                        dtype=np.int64)
    report.sources["planned"][chosen[chosen < report.n]] = True
    # the ranking behind it (asked after the selection, which it must not change)
    priority = service.policy.priority(report.plan_epoch)
    if priority is not None:
        report.ranks = True
        report.sources["index"][:n] = np.asarray(priority, dtype=np.float64)[:n]
    else:
        report.notes.append(f"policy {core!r} does not rank sources: it chooses them "
                            "otherwise (no index to show)")
    report.sources["cost"][:n] = service.sources.cost[:n]
    not_before = service.sources.last_crawl[:n] + service.sources.min_interval[:n]
    report.sources["not_before"][:n] = np.fmax(report.sources["not_before"][:n],
                                              np.nan_to_num(not_before, neginf=0.0))
