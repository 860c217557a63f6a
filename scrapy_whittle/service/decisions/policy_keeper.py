"""The re-crawl service's policy, and what it has not been told yet.

Sources registered while the crawl runs join the policy in a batch (:meth:`PolicyKeeper.grow`,
before each selection, flush or checkpoint), not one by one: growing a policy's arrays costs
the same for one source as for many. Before each selection the policy checks the sources it
learned of since the previous one and resets those whose state went bad (``Policy.repair``);
a selection that still raises on the policy's state is retried once after a full check, so
one source's state never stops the crawl."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import numpy as np

from scrapy_whittle.core.policies import Policy
from scrapy_whittle.service.once_log import OnceLog
from scrapy_whittle.service.sources.source_state import SourceState
from scrapy_whittle.service.sources.source_table import SourceTable
from scrapy_whittle.service.types import Stats

#: the keyword arguments ``Policy.grow`` takes for new sources (an oracle's parameters)
GrowExtra = Callable[[np.ndarray], dict]

#: rows exported at once to digest them (``export_rows`` copies them)
DIGEST_CHUNK = 1 << 18
#: odd multipliers, one per 8 bytes of a row (repeated past 4 KiB)
_ODD = np.random.default_rng(0x5EED).integers(0, 2**63, size=512, dtype=np.uint64) * 2 + 1


def row_digests(policy: Policy, ids: np.ndarray) -> np.ndarray:
    """A 64-bit digest of each of rows ``ids`` of ``policy``'s persisted state (equal rows,
    equal digests): what tells the rows a selection changed, without keeping a copy. The
    XOR of each 8-byte word times its own odd multiplier: a change of one word always
    changes the digest (an odd multiplier is a bijection modulo 2**64)."""
    out = np.zeros(ids.shape[0], dtype=np.uint64)
    if not ids.shape[0] or not policy.row_dtype().itemsize:   # nothing to digest
        return out
    for start in range(0, ids.shape[0], DIGEST_CHUNK):
        rows = policy.export_rows(ids[start:start + DIGEST_CHUNK])
        raw = np.frombuffer(rows.tobytes(), dtype=np.uint8).reshape(rows.shape[0], -1)
        pad = -raw.shape[1] % 8
        if pad:
            raw = np.pad(raw, ((0, 0), (0, pad)))
        words = np.ascontiguousarray(raw).view(np.uint64)
        out[start:start + rows.shape[0]] = np.bitwise_xor.reduce(
            words * np.resize(_ODD, words.shape[1]), axis=1)
    return out


class PolicyKeeper:
    """Holds the policy (``policy``, None before the service opens) and the sources it must
    grow by (``pending_grow``), set up (``grown_since_select``: a policy may set up their
    rows at its next selection) or check (``unchecked``); ``touched``: its global state
    changed since the last checkpoint."""

    def __init__(self, sources: SourceTable, state: SourceState, stats: Stats,
                 log_once: OnceLog, policy_name: str, grow_extra: GrowExtra) -> None:
        self.sources = sources
        self.state = state
        self.stats = stats
        self.log_once = log_once
        self.grow_extra = grow_extra
        self.policy: Policy | None = None
        self.pending_grow: list[int] = []
        self.grown_since_select: list[int] = []
        self.unchecked: set[int] = set()
        self.touched = True
        self._seconds_key = f"decision/{policy_name}/seconds"
        self._calls_key = f"decision/{policy_name}/calls"

    def start(self, policy: Policy) -> None:
        """``policy`` knows every source registered so far; all of them are new to it."""
        self.policy = policy
        self.pending_grow = []
        self.grown_since_select = list(range(policy.n))

    def sources_added(self, new: list[int]) -> None:
        if self.policy is not None:
            self.pending_grow.extend(new)

    def grow(self) -> None:
        """The policy learns of the sources registered since it last grew."""
        if not self.pending_grow:
            return
        sids = np.asarray(self.pending_grow, dtype=np.int64)
        self.pending_grow = []
        self.policy.grow(len(sids), self.sources.cost[sids], **self.grow_extra(sids))
        self.set_half_life_priors(sids)
        self.grown_since_select.extend(sids.tolist())
        self.touched = True

    def set_half_life_priors(self, ids: np.ndarray) -> None:
        h = self.sources.half_life[ids]
        ids = ids[~np.isnan(h)]
        if ids.size:
            self.policy.set_prior_half_life(ids, self.sources.half_life[ids].astype(float))

    def select(self, k: int, budget: float, eligible: np.ndarray | None) -> np.ndarray:
        """Epoch ``k``'s choice: the unchecked sources are checked first, and a selection that
        fails on the policy's state is tried once more after a full check."""
        t = time.perf_counter()
        unchecked, self.unchecked = self.unchecked, set()
        self.repair(unchecked)
        grown = np.asarray(self.grown_since_select, dtype=np.int64)
        grown = grown[grown < self.policy.n]
        before = row_digests(self.policy, grown)
        try:
            chosen = self.policy.select(k, budget, eligible)
        except (ValueError, FloatingPointError, ZeroDivisionError, OverflowError) as exc:
            if not self.repair(None, cause=f"{type(exc).__name__}: {exc}").size:
                raise
            chosen = self.policy.select(k, budget, eligible)
        self.decision_time(time.perf_counter() - t, calls=1)
        self.touched = True
        # a policy may set up the rows of sources added since its last selection: those it
        # changed go to the next checkpoint (after a restore, the rows are as stored: a
        # restored crawl's first checkpoint does not rewrite every source)
        self.state.touch(grown[row_digests(self.policy, grown) != before])
        self.grown_since_select = []
        return chosen

    def repair(self, ids: Iterable[int] | None, cause: str = "") -> np.ndarray:
        """Have the policy check the learned state of sources ``ids`` (None: all) and reset
        those whose state is unusable to their prior (``Policy.repair``): logged once per
        source, counted under ``whittle/state_resets``. Returns the ids reset."""
        if ids is None:
            self.unchecked.clear()
            reset = self.policy.repair(None)
        else:
            checked = np.fromiter(ids, dtype=np.int64)
            checked = checked[checked < self.policy.n]
            reset = self.policy.repair(checked) if checked.size else checked
        reset = np.asarray(reset, dtype=np.int64)
        if reset.size:
            self.stats.inc("state_resets", int(reset.size))
            why = f" ({cause})" if cause else ""
            for sid in reset.tolist():
                self.log_once(sid, "state_reset", self.sources.url(sid),
                              f"learned state unusable{why}: reset to the prior")
                self.state.touch(sid)
            self.touched = True
        return reset

    def decision_time(self, seconds: float, calls: int) -> None:
        """Time spent choosing and learning (``whittle/decision/<policy>/...``)."""
        self.stats.inc(self._seconds_key, seconds)
        if calls:
            self.stats.inc(self._calls_key, calls)

