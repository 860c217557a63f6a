from __future__ import annotations

import numpy as np
import pytest

from scrapy_whittle.selection import TopSelector, select_top


def test_unit_costs_take_the_top_k_with_ties_to_the_lower_index():
    prio = np.array([1.0, 5.0, 3.0, 5.0, 0.0, 3.0])
    np.testing.assert_array_equal(select_top(prio, None, 3), [1, 3, 2])
    np.testing.assert_array_equal(select_top(prio, np.ones(6), 3), [1, 3, 2])
    assert select_top(prio, None, 0).size == 0
    np.testing.assert_array_equal(np.sort(select_top(prio, None, 10)), np.arange(6))


def test_costs_fill_the_budget_greedily_in_priority_order():
    prio = np.array([9.0, 8.0, 7.0, 6.0])
    cost = np.array([2.0, 3.0, 1.0, 1.0])
    # 9 (2) fits, 8 (3) does not fit in the 3 left ... 7 (1) and 6 (1) do
    np.testing.assert_array_equal(select_top(prio, cost, 4), [0, 2, 3])
    chosen = select_top(prio, cost, 5)
    assert cost[chosen].sum() <= 5
    np.testing.assert_array_equal(chosen, [0, 1])


def test_eligible_mask_excludes_sources():
    prio = np.array([9.0, 8.0, 7.0])
    np.testing.assert_array_equal(select_top(prio, None, 2, np.array([False, True, True])),
                                  [1, 2])


@pytest.mark.parametrize("k", [1, 7, 100])
def test_top_selector_equals_select_top_on_drifting_priorities(k):
    rng = np.random.default_rng(k)
    prio = rng.lognormal(size=5000)
    sel = TopSelector()
    for _ in range(30):
        prio = prio * rng.uniform(0.9, 1.15, prio.shape)  # drift, sometimes far
        np.testing.assert_array_equal(sel(prio, None, k), select_top(prio, None, k))
    # a collapse of all priorities forces the fallback path
    np.testing.assert_array_equal(sel(prio * 1e-6, None, k), select_top(prio * 1e-6, None, k))
