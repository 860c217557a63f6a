"""The changing pages a learned Whittle policy (``whittle``) ranks, and what it learned of them.

A page (observations without item arrays: ``new_items`` is the changed bit, the reward the
importance captured; Avrachenkov, Borkar & Patil, *Deep Reinforcement Learning for Web
Crawling*, ICC 2021) has a change rate lambda_hat per epoch (``ChangeRateEstimator``, Cho &
Garcia-Molina) and m_hat, the mean reward of a crawl that found a change, through the bridge
alpha = exp(-lambda_hat), u = m_hat (1 - exp(-lambda_hat)). Both estimators keep rows only for
the sources seen as pages (row ``rows.row[i]`` belongs to source i), so the many feeds cost
four bytes each.
"""

from __future__ import annotations

import numpy as np

from scrapy_whittle.core.columns import SparseRows
from scrapy_whittle.core.dynamics import pages_alpha_u
from scrapy_whittle.core.estimators import ChangeRateEstimator, ValueEstimator

#: what a learned policy takes a source for (its ``kind`` column): not seen yet, ephemeral
#: content with item arrays, a changing page, ephemeral content seen through counts only
UNKNOWN, EPHEMERAL, PAGE, COUNTS = 0, 1, 2, 3


def prior_at(value, ids: np.ndarray):
    """A prior given as a scalar, an array over all sources or ``callable(ids)``, for ``ids``."""
    if callable(value):
        return value(ids)
    arr = np.asarray(value, dtype=np.float64)
    return arr if arr.ndim == 0 else arr[ids]


def per_epoch(rate, period: float):
    """A rate per unit of time (scalar, array or callable(ids)) as a rate per epoch."""
    if callable(rate):
        return lambda ids: np.asarray(rate(ids), dtype=np.float64) * period
    return np.asarray(rate, dtype=np.float64) * period


class LearnedPages:
    """The pages of ``policy`` (an ``AdaptiveWhittlePolicy``: its ``kind``, ``model``,
    ``prior_rate`` and value prior): their change-rate and importance estimators."""

    def __init__(self, policy) -> None:
        self.policy = policy
        self.changes = ChangeRateEstimator(
            0, prior_rate=per_epoch(policy.prior_rate, float(policy.problem.period)),
            prior_weight=policy.prior_weight)
        self.importance = ValueEstimator(0, prior_mean=1.0, prior_weight=policy.prior_weight)
        self.rows = SparseRows(self._allocate)
        self.grow(policy.n)

    def _allocate(self, ids: np.ndarray) -> np.ndarray:
        policy = self.policy
        start = self.changes.n
        rate = per_epoch(policy.prior_rate, float(policy.problem.period))
        self.changes.grow(ids.shape[0], prior_rate=prior_at(rate, ids))
        self.importance.grow(ids.shape[0], prior_mean=policy.values.m0[ids])
        return np.arange(start, start + ids.shape[0])

    def grow(self, n_new: int) -> None:
        """Room for ``n_new`` sources added at the end (pages from the start with
        ``model="pages"``)."""
        n = self.rows.row.shape[0]
        self.rows.grow(n_new)
        if self.policy.model == "pages":
            self.rows.rows(np.arange(n, n + n_new), create=True)

    def positions(self, ids=slice(None)) -> np.ndarray | None:
        """Positions among ``ids`` of the sources ranked as pages (None: none)."""
        kind = self.policy.kind[ids]
        page = kind == PAGE
        if self.policy.model == "pages":
            page |= kind == UNKNOWN
        return np.flatnonzero(page) if page.any() else None

    def alphas(self, at, alpha, log_alpha, one_minus, ids=slice(None)) -> np.ndarray:
        """Set the (alpha, log alpha, 1 - alpha) of the pages at positions ``at`` of ``ids``
        (an index array, or ``slice(None)``: all sources) from their change rates (alpha
        None: not wanted); returns their u."""
        src = at if isinstance(ids, slice) else ids[at]
        rows = self.rows.rows(src)
        page_alpha, u = pages_alpha_u(self.changes.mean()[rows], self.importance.mean()[rows])
        if alpha is not None:
            alpha[at] = page_alpha
        with np.errstate(divide="ignore"):
            log_alpha[at] = np.log(page_alpha)
        one_minus[at] = -np.expm1(log_alpha[at])
        return u

    def change_rates(self, ids: np.ndarray) -> np.ndarray:
        """Change rates per epoch of the pages ``ids``."""
        return self.changes.mean()[self.rows.rows(ids)]

    def visited(self, out: np.ndarray, ids=None) -> np.ndarray:
        """``out`` (bool over ``ids``, None: all sources) or'ed with: the change-rate
        estimator visited the source (a crawl of it as a page taught something)."""
        pages = self.rows.has(ids)
        if pages.any():
            at = np.flatnonzero(pages)
            src = at if ids is None else ids[pages]
            out[at] |= self.changes.visits[self.rows.rows(src)] > 0
        return out

    def observe(self, obs, sel, src, reward, since) -> None:
        """Crawls ``sel`` of ``src`` as pages, ``since`` epochs after their previous ones."""
        changed = (obs.new_items[sel] > 0)
        rows = self.rows.rows(src, create=True)
        self.changes.update(rows, since, changed)
        self.importance.update(rows[changed], reward[changed])

    def kind_after(self, new: np.ndarray, src: np.ndarray, reward: np.ndarray) -> np.ndarray:
        """The kind of sources ``src`` after crawls without item arrays that found ``new``
        entries worth ``reward`` (model "auto" or "ephemeral"): a page until one shows more than
        one new entry, a value without a new entry, or two different values when changed (a
        page's importance is fixed); count-only ephemeral content for good after that."""
        policy = self.policy
        rows = self.rows.rows(src)
        seen = self.importance.count[rows] > 0
        m_prev = self.importance.total[rows] / np.where(seen, self.importance.count[rows], 1.0)
        varies = seen & (new > 0) & (np.abs(reward - m_prev) > 1e-9 * np.maximum(1.0, m_prev))
        counts = ((policy.kind[src] == COUNTS) | (policy.model == "ephemeral")
                  | (new > 1) | ((new == 0) & (reward > 0)) | varies)
        return np.where(counts, COUNTS, PAGE)

    def invalid(self, ids: np.ndarray) -> np.ndarray:
        """bool over ``ids``: the source's page rows hold unusable numbers."""
        bad = np.zeros(ids.shape[0], dtype=bool)
        pages = self.rows.has(ids)
        if pages.any():
            rows = self.rows.rows(ids[pages])
            bad[pages] = self.changes.invalid(rows) | self.importance.invalid(rows)
        return bad

    def reset(self, ids: np.ndarray) -> None:
        """The page rows of sources ``ids`` back to their priors."""
        pages = self.rows.has(ids)
        if pages.any():
            rows = self.rows.rows(ids[pages])
            self.changes.reset(rows)
            self.importance.reset(rows)

    def estimates(self, importance: np.ndarray, period: float) -> dict[str, np.ndarray]:
        """Change rate (per unit of time) and importance, with their standard errors, of
        every source (NaN, and ``importance``'s prior, where never seen as a page)."""
        n = importance.shape[0]
        change, change_std = np.full(n, np.nan), np.full(n, np.nan)
        importance_std = np.full(n, np.nan)
        ids = np.flatnonzero(self.rows.has())
        if ids.size:
            rows = self.rows.rows(ids)
            change[ids] = self.changes.mean()[rows] / period
            change_std[ids] = self.changes.std()[rows] / period
            importance[ids] = self.importance.mean()[rows]
            importance_std[ids] = self.importance.std()[rows]
        return {"change_rate": change, "change_rate_std": change_std,
                "importance": importance, "importance_std": importance_std}
