"""Shared plumbing of the online estimators: per-source arrays that grow and persist.

Every estimator is vectorised over N sources. A subclass lists its per-source arrays in
``per_source`` (name -> fill value or :class:`~scrapy_whittle.columns.Col`; priors are
filled by ``_fill_prior``).

Garbage in (the one policy every estimator follows): data values that are not finite, are
negative where they must not be, have a zero or negative exposure/interval, or lie in the
future are *skipped*, never raised on, and ``update``-style methods return a bool mask
``accepted`` saying which inputs were used (a scalar ``report`` returns one bool). A crawl
must not die because one feed printed nonsense. ``ValueError`` is raised only for programming
errors: mismatched shapes, source ids out of range, invalid constructor arguments.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scrapy_whittle.columns import PerSourceArrays


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


class VectorEstimator(PerSourceArrays):
    """Base class: per-source state arrays (``per_source``, see
    :mod:`scrapy_whittle.columns`), ``grow``, ``state_dict`` / ``load_state_dict``."""

    def __init__(self, n: int = 0) -> None:
        if int(n) < 0:
            raise ValueError(f"n ({n!r}) must be >= 0")
        self._init_arrays(0)
        self.grow(int(n))

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
