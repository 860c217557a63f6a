"""Shared plumbing of the online estimators: per-source arrays that grow and persist.

Every estimator is vectorised over N sources. A subclass lists its per-source arrays in
``per_source`` (name -> fill value for a new source; priors are filled by ``_fill_prior``)
and its trailing shape in ``trailing`` when an array is 2-D (N x B).

Garbage in (the one policy every estimator follows): data values that are not finite, are
negative where they must not be, have a zero or negative exposure/interval, or lie in the
future are *skipped*, never raised on, and ``update``-style methods return a bool mask
``accepted`` saying which inputs were used (a scalar ``report`` returns one bool). A crawl
must not die because one feed printed nonsense. ``ValueError`` is raised only for programming
errors: mismatched shapes, source ids out of range, invalid constructor arguments.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np


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


class VectorEstimator:
    """Base class: per-source state arrays, ``grow``, ``state_dict`` / ``load_state_dict``."""

    per_source: ClassVar[dict[str, float]] = {}
    trailing: ClassVar[dict[str, int]] = {}     # name -> B for (N, B) arrays

    def __init__(self, n: int = 0) -> None:
        if int(n) < 0:
            raise ValueError(f"n ({n!r}) must be >= 0")
        for name, fill in self.per_source.items():
            shape = (0, self.trailing[name]) if name in self.trailing else (0,)
            setattr(self, name, np.full(shape, fill, dtype=np.float64))
        self._n = 0
        self.grow(int(n))

    @property
    def n(self) -> int:
        return self._n

    def grow(self, n_new: int, **prior: Any) -> None:
        """Add ``n_new`` sources (ids n .. n + n_new - 1), with optional prior overrides."""
        if n_new <= 0:
            return
        for name, fill in self.per_source.items():
            old = getattr(self, name)
            new = np.full((n_new, *old.shape[1:]), fill, dtype=np.float64)
            setattr(self, name, np.concatenate([old, new]))
        ids = np.arange(self._n, self._n + n_new)
        self._n += n_new
        self._fill_prior(ids, **prior)

    def _fill_prior(self, ids: np.ndarray, **prior: Any) -> None:
        """Set the prior arrays of new sources ``ids`` (subclasses)."""

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"estimator": type(self).__name__, "n": self._n}
        for name in self.per_source:
            state[name] = getattr(self, name).copy()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("estimator") != type(self).__name__:
            raise ValueError(f"state of {state.get('estimator')!r} cannot be loaded into "
                             f"{type(self).__name__}")
        n = int(state["n"])
        if n > self._n:
            self.grow(n - self._n)
        for name in self.per_source:
            getattr(self, name)[:n] = np.asarray(state[name], dtype=np.float64)
        self._after_load()

    def _after_load(self) -> None:
        """Hook: invalidate caches after a restore."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self._n})"
