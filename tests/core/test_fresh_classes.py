"""FreshClasses: of the sources never crawled, grouped by what their priority is made of, the
few that may be among the top k, found without a pass over every source."""

from __future__ import annotations

import numpy as np
import pytest

from scrapy_whittle.core.policies.fresh_classes import FreshClasses


def _priority(params, group, pooled, epoch):
    """x = max(u w, m0 P[g] C) per source, as ``ReachingTop._expected_at`` computes it."""
    u, added, m0, cost = params.T
    x = u * np.maximum(epoch - np.where(np.isinf(added), epoch, added), 0.0)
    prior_x = m0 * pooled[group] * cost
    return np.where(prior_x > x, prior_x, x)


@pytest.mark.parametrize("seed", range(4))
def test_the_candidates_hold_the_top_k_of_the_sources_in_a_class(seed):
    """Whatever the priorities' ties (groups without a prior, many groups at u w), the mask
    and the sources that left: the top k by priority, then by id, of the eligible sources
    still in a class are among the candidates, which are all eligible and in a class."""
    rng = np.random.default_rng(seed)
    n, n_groups = 3000, 30
    ids = np.flatnonzero(rng.random(n) < 0.8)
    params = np.column_stack([rng.choice([0.5, 1.0], ids.size),
                              rng.choice([0.0, 2.0, -np.inf], ids.size),
                              rng.choice([1.0, 2.0], ids.size), np.ones(ids.size)])
    group = rng.integers(0, n_groups, ids.size).astype(np.int32)
    classes = FreshClasses()
    classes.build(ids, params, group, n)
    assert len(classes.runs) == 12
    every = np.full((n, 4), np.nan)
    every[ids] = params
    groups = np.zeros(n, dtype=np.int32)
    groups[ids] = group
    for step in range(12):
        epoch = 1.0 + 0.5 * step
        pooled = rng.uniform(0.0, 3.0, n_groups)
        pooled[rng.random(n_groups) < 0.5] = np.nan         # no prior learned: u w alone
        left = ids[rng.random(ids.size) < 0.02]
        classes.changed(left)
        eligible = rng.random(n) < 0.9
        k = int(rng.integers(1, 80))
        cand = classes.candidates(epoch, pooled, k, eligible)
        inside = np.flatnonzero((classes.label >= 0) & eligible)
        assert np.all(classes.label[cand] >= 0) and np.all(eligible[cand])
        assert np.unique(cand).size == cand.size
        prio = _priority(every[inside], groups[inside], pooled, epoch)
        top = inside[np.lexsort((inside, -prio))[:k]]
        assert np.isin(top, cand).all()
        assert cand.size <= 12 * n_groups * k


def test_too_many_classes_keep_none():
    """Per-source parameters (hints for every source) make no classes: every source is then
    ranked one by one."""
    ids = np.arange(FreshClasses.MAX_CLASSES + 1)
    params = np.column_stack([1.0 + ids, np.zeros(ids.size), np.ones(ids.size),
                              np.ones(ids.size)])
    classes = FreshClasses()
    classes.build(ids, params, np.zeros(ids.size, dtype=np.int32), ids.size)
    assert not classes.ready and not classes.in_class(slice(None)).any()
