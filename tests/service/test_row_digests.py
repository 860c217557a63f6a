"""``row_digests`` tells the policy rows a selection changed: so the policy's first selection
after a restore leaves the restored rows as they were, and the first checkpoint writes the
sources crawled since, not every one restored (``tests/storage`` checks that on each store)."""

from __future__ import annotations

import numpy as np
import pytest

from scrapy_whittle.service.decisions.policy_keeper import row_digests


class _Rows:
    """A policy's persisted rows, as ``row_digests`` reads them."""

    def __init__(self, rows: np.ndarray) -> None:
        self.rows = rows

    def row_dtype(self) -> np.dtype:
        return self.rows.dtype

    def export_rows(self, ids) -> np.ndarray:
        return self.rows[ids]


@pytest.mark.parametrize("dtype", [[("a", "<f8"), ("b", "u1")], [("x", "<f8", (700,))]])
def test_row_digests_tell_every_changed_row(dtype):
    rows = np.zeros(64, dtype=dtype)
    raw = rows.view(np.uint8).reshape(64, -1)
    raw[:] = np.random.default_rng(1).integers(0, 256, size=raw.shape, dtype=np.uint8)
    ids = np.arange(64)
    before = row_digests(_Rows(rows), ids)
    assert (row_digests(_Rows(rows.copy()), ids) == before).all()
    changed = rows.copy()
    craw = changed.view(np.uint8).reshape(64, -1)
    for i in range(0, 64, 2):                 # one byte of every other row, anywhere
        craw[i, (i * 37) % craw.shape[1]] ^= 1 << (i % 8)
    assert ((row_digests(_Rows(changed), ids) != before) == (ids % 2 == 0)).all()


def test_rows_of_no_width_have_one_digest():
    assert (row_digests(_Rows(np.zeros(3, dtype=[])), np.arange(3)) == 0).all()
