"""A crawl restored from its state file writes in its first checkpoint what changed since,
not every source (the policy's first selection after a restore leaves the restored rows as
they were: ``row_digests`` tells the rows a selection changed)."""

from __future__ import annotations

import numpy as np
import pytest

from scrapy_whittle.service.policy_keeper import row_digests
from scrapy_whittle.service.store import FILE_NAME, SqliteStateStore
from tests.service.test_recrawl import PoissonFeeds, crawl_epochs, make_service

N, BUDGET = 50, 5


@pytest.mark.parametrize("policy", ["whittle", "thompson-whittle", "diurnal-whittle"])
def test_the_first_checkpoint_after_a_restore_writes_the_crawled_sources(tmp_path, policy):
    feeds = PoissonFeeds([1 / 600] * N)
    service, clock = make_service(n=N, policy=policy, budget=BUDGET,
                                  store=SqliteStateStore(tmp_path / FILE_NAME))
    crawl_epochs(service, clock, feeds, 3)
    service.checkpoint()
    restored, _ = make_service(n=N, policy=policy, budget=BUDGET, clock=clock,
                               store=SqliteStateStore(tmp_path / FILE_NAME))
    crawl_epochs(restored, clock, feeds, 1)
    cp = restored.prepare_checkpoint()
    assert cp.n_new == 0
    assert 0 < cp.n_changed <= BUDGET


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
