"""scrapy_whittle.core.distinct: the same answers as np.unique, found by sorting."""

from __future__ import annotations

import numpy as np
import pytest

from scrapy_whittle.core.distinct import all_distinct, distinct, first_of_each


def _cases():
    rng = np.random.default_rng(0)
    yield np.zeros(0, dtype=np.int64)
    yield np.array([7])
    yield np.array([3, 3, 3, 3])
    yield np.array([-5, 2, -5, 9, 2, 0])
    yield rng.integers(0, 50, 200)                          # many repeats
    yield rng.permutation(1000)                             # none
    yield rng.integers(0, 2**64 - 1, 5000, dtype=np.uint64, endpoint=True)   # URL hashes
    h = rng.integers(2**63, 2**64 - 1, 300, dtype=np.uint64)
    yield np.concatenate([h, h[::7]])                       # high bit set, some twice
    yield rng.integers(0, 9, (6, 5))                        # any shape: flattened


@pytest.mark.parametrize("values", list(_cases()))
def test_equal_to_numpy_unique(values):
    want, want_first = np.unique(values, return_index=True)
    got = distinct(values)
    assert got.dtype == want.dtype and np.array_equal(got, want)
    got, got_first = first_of_each(values)
    assert np.array_equal(got, want) and np.array_equal(got_first, want_first)
    assert all_distinct(values) == (want.shape[0] == np.asarray(values).size)
