"""Repair of a learned Whittle policy (``whittle``): the sources whose learned state went bad
(a number that is not finite where it should be, parameters out of range) go back to their
priors, so that one source fed nonsense never stops the crawl."""

from __future__ import annotations

import numpy as np

from scrapy_whittle.core.distinct import distinct
from scrapy_whittle.core.policies.learned_pages import UNKNOWN


def repair_sources(policy, ids=None) -> np.ndarray:
    """``AdaptiveWhittlePolicy.repair``: sources ``ids`` (None: every source, and then their
    parameters too) whose estimators hold unusable numbers (``VectorEstimator.invalid``) or
    whose (alpha, u) are not finite and in range are reset (``reset_sources``). Returns the
    ids reset."""
    full = ids is None
    ids = np.arange(policy.n) if full else distinct(np.asarray(ids, dtype=np.int64))
    ids = ids[(ids >= 0) & (ids < policy.n)]
    bad = np.isinf(policy.last_epoch[ids]) | np.isinf(policy.added_epoch[ids])
    for estimator in policy._row_children().values():
        bad |= estimator.invalid(ids)
    bad |= policy.pages.invalid(ids) | policy.pushes.invalid(ids)
    if full and ids.size:
        with np.errstate(all="ignore"):
            alpha, u = policy.parameters()
        bad |= ~((alpha[ids] >= 0) & (alpha[ids] <= 1) & (u[ids] >= 0) & np.isfinite(u[ids]))
    out = ids[bad]
    if out.size:
        reset_sources(policy, out)
    return out


def reset_sources(policy, ids: np.ndarray) -> None:
    """Sources ``ids`` back to their priors: evidence forgotten, unexplored again (so the
    optimistic priority of a new source brings them back soon)."""
    for estimator in policy._row_children().values():
        estimator.reset(ids)
    policy.pages.reset(ids)
    policy.pushes.reset(ids)
    policy.kind[ids] = UNKNOWN
    policy._estimates_changed(ids)
    policy.last_epoch[ids] = np.nan
    policy.history_epoch[ids] = np.nan
    policy.added_epoch[ids] = np.where(np.isinf(policy.added_epoch[ids]), np.nan,
                                       policy.added_epoch[ids])
    policy._times_changed()
    policy._pruning.forget()
    policy.reaching.forget()
