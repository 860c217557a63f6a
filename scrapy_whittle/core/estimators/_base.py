"""Shared plumbing of the online estimators: per-source arrays that grow and persist.

Every estimator is vectorised over N sources. A subclass lists its per-source arrays in
``per_source`` (name -> fill value or :class:`~scrapy_whittle.core.columns.Col`; priors are
filled by ``_fill_prior``).

Garbage in (the one policy every estimator follows): data values that are not finite, beyond
``MAX_INPUT`` in magnitude (their squares and sums must stay finite), negative where they must
not be, have a zero or negative exposure/interval, or lie in the future are *skipped*, never
raised on, and ``update``-style methods return a bool mask ``accepted`` saying which inputs
were used (a scalar ``report`` returns one bool). A crawl must not die because one feed
printed nonsense. ``ValueError`` is raised only for programming errors: mismatched shapes,
source ids out of range, invalid constructor arguments.

State gone bad (restored from a damaged store, say): ``invalid(ids)`` tells which sources hold
a number that is not finite where it must be, ``reset(ids)`` forgets their evidence (back to
the prior, which is kept where it is itself usable). Policies call them from
``Policy.repair``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from scrapy_whittle.core.columns import PerSourceArrays, refill_rows, unusable_rows

#: inputs larger than this in magnitude are refused as garbage (no real count, value, age or
#: exposure comes near it, and the sums of squares of such inputs stay finite)
MAX_INPUT = 1e100


def plausible(x: np.ndarray) -> np.ndarray:
    """bool mask: finite and at most ``MAX_INPUT`` in magnitude."""
    return np.isfinite(x) & (np.abs(x) <= MAX_INPUT)


def as_sources(sources, n: int) -> np.ndarray:
    ids = np.atleast_1d(np.asarray(sources, dtype=np.int64))
    if ids.ndim != 1:
        raise ValueError(f"sources must be a 1-D array of ids, got shape {ids.shape}")
    if ids.size and (ids.min() < 0 or ids.max() >= n):
        raise ValueError(f"source ids must lie in [0, {n}), got {ids.min()}..{ids.max()}")
    return ids


def as_column(name: str, value, k: int, dtype=np.float64) -> np.ndarray:
    """``value`` broadcast to shape (k,) (scalars allowed); shape mismatches raise."""
    arr = np.asarray(value, dtype=dtype)
    if arr.ndim == 0:
        return np.full(k, arr, dtype=dtype)
    if arr.shape != (k,):
        raise ValueError(f"{name} must have one value per source id ({k}), got {arr.shape}")
    return arr


def as_ragged(name: str, offsets, values, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, values) of a ragged array of k rows: row j is ``values[off[j]:off[j+1]]``;
    offsets k + 1 non-decreasing ints from 0 to len(values), else ValueError."""
    off = np.asarray(offsets, dtype=np.int64)
    vals = np.asarray(values, dtype=np.float64)
    if off.shape != (k + 1,) or off[0] != 0 or np.any(np.diff(off) < 0) \
            or vals.shape != (off[-1],):
        raise ValueError(f"offsets must be {k} + 1 non-decreasing ints from 0 to "
                         f"len({name})")
    return off, vals


def per_source_prior(name: str, value, ids: np.ndarray, *, positive: bool = True) -> np.ndarray:
    """A prior for the sources ``ids``: a scalar, an array over them, or ``callable(ids)``."""
    if callable(value):
        value = value(ids)
    arr = as_column(name, value, ids.shape[0])
    bad = ~np.isfinite(arr) | ((arr <= 0) if positive else (arr < 0))
    if np.any(bad):
        raise ValueError(f"{name} must be finite and {'> 0' if positive else '>= 0'}, "
                         f"got {arr[bad][:3]!r}")
    return arr


def segment_sum(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Sum of ``values[off[j]:off[j+1]]`` for every j (empty segments give 0)."""
    c = np.concatenate([[0.0], np.cumsum(values, dtype=np.float64)])
    return c[offsets[1:]] - c[offsets[:-1]]


def segment_rows(off: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR offsets and item indices of the rows ``keep`` of a ragged array with offsets
    ``off``: a bool mask, or row numbers (in the order wanted)."""
    keep = np.asarray(keep)
    rows = np.flatnonzero(keep) if keep.dtype == bool else keep.astype(np.int64)
    starts = off[rows]
    lengths = off[rows + 1] - starts
    new_off = np.zeros(rows.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_off[1:])
    idx = (np.repeat(starts - new_off[:-1], lengths) + np.arange(new_off[-1])).astype(np.int64)
    return new_off, idx


class VectorEstimator(PerSourceArrays):
    """Base class: per-source state arrays (``per_source``, see
    :mod:`scrapy_whittle.core.columns`), ``grow``, ``state_dict`` / ``load_state_dict``."""

    #: columns that hold a source's prior (``reset`` keeps them where they are usable)
    prior_columns: ClassVar[tuple[str, ...]] = ()

    def __init__(self, n: int = 0) -> None:
        if int(n) < 0:
            raise ValueError(f"n ({n!r}) must be >= 0")
        self._init_arrays(0)
        self.grow(int(n))

    # -- state gone bad ---------------------------------------------------------------------
    def invalid(self, sources) -> np.ndarray:
        """bool per source of ``sources``: its state is unusable (a persisted number that is
        not finite where it must be, here or in a sparse block, or ``_invalid_extra``)."""
        ids = np.asarray(sources, dtype=np.int64)
        bad = unusable_rows(self, ids) | self._invalid_extra(ids)
        for index, block in self._sparse_children().values():
            rows = index.row[ids]
            has = rows >= 0
            if has.any():
                bad[has] |= unusable_rows(block, rows[has])
        return bad

    def _invalid_extra(self, ids: np.ndarray) -> np.ndarray:
        """Subclasses: further checks (a rate that must be > 0, say)."""
        return np.zeros(ids.shape[0], dtype=bool)

    def reset(self, sources) -> None:
        """Forget the evidence of ``sources``: their state goes back to the prior (the
        ``prior_columns`` are kept where they are usable, else set from the estimator's
        prior)."""
        ids = as_sources(sources, self.n)
        if not ids.size:
            return
        keep = self.prior_columns
        bad_prior = np.zeros(ids.shape[0], dtype=bool)
        for name in keep:
            v = getattr(self, name)[ids]
            bad_prior |= ~(np.isfinite(v) & (v > 0))
        refill_rows(self, ids, keep)
        for index, block in self._sparse_children().values():
            rows = index.row[ids]
            refill_rows(block, rows[rows >= 0])
        self._reset_prior(ids, bad_prior)
        self._after_reset(ids)

    def _reset_prior(self, ids: np.ndarray, bad_prior: np.ndarray) -> None:
        """After ``reset``: set the prior where it was unusable (or is not kept apart)."""
        if bad_prior.any():
            self._fill_prior(ids[bad_prior])

    def _after_reset(self, ids: np.ndarray) -> None:
        """Hook: invalidate caches after ``reset``."""

    @property
    def n(self) -> int:
        return self.n_rows

    def grow(self, n_new: int, **prior: Any) -> None:
        """Add ``n_new`` sources (ids n .. n + n_new - 1), with optional prior overrides."""
        if n_new <= 0:
            return
        ids = self.grow_arrays(int(n_new))
        self._fill_prior(ids, **prior)

    def _fill_prior(self, ids: np.ndarray, **prior: Any) -> None:
        """Set the prior arrays of new sources ``ids`` (subclasses)."""

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"estimator": type(self).__name__, "n": self.n}
        for name, col in self._cols.items():
            if col.persist:
                state[name] = getattr(self, name).copy()
        blocks = self.export_blocks(np.arange(self.n))
        if blocks:
            state["blocks"] = blocks
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("estimator") != type(self).__name__:
            raise ValueError(f"state of {state.get('estimator')!r} cannot be loaded into "
                             f"{type(self).__name__}")
        n = int(state["n"])
        if n > self.n:
            self.grow(n - self.n)
        for name, col in self._cols.items():
            if col.persist and name in state:
                getattr(self, name)[:n] = np.asarray(state[name], dtype=col.dtype)
        self.import_blocks(state.get("blocks", {}))
        self._after_import()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.n})"
