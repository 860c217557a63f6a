"""Per-source arrays that grow (columns.py): amortised growth, rows, sparse blocks, strings."""

import numpy as np

from scrapy_whittle.core.columns import (
    Col,
    PerSourceArrays,
    SparseRows,
    StringColumn,
    grown,
    room_for,
    with_room,
)


class Table(PerSourceArrays):
    per_source = {"a": 0.0, "b": Col(7, np.int32), "c": Col(np.nan, persist=False),
                  "d": Col(1.0, width=3)}

    def __init__(self):
        self._init_arrays(0)


def test_growing_one_at_a_time_keeps_values_and_fills_new_rows():
    t = Table()
    for i in range(1000):
        (row,) = t.grow_arrays(1)
        t.a[row] = i
    assert t.n_rows == 1000 and t.a.shape == (1000,) and t.d.shape == (1000, 3)
    np.testing.assert_array_equal(t.a, np.arange(1000))
    assert set(t.b.tolist()) == {7} and np.isnan(t.c).all()
    t.a = t.a * 2                                   # an owner may replace a column
    t.grow_arrays(5)
    np.testing.assert_array_equal(t.a[:1000], 2 * np.arange(1000))
    assert t.a[1000:].tolist() == [0.0] * 5


def test_rows_export_and_import_only_persisted_columns():
    t, u = Table(), Table()
    t.grow_arrays(4)
    u.grow_arrays(4)
    t.a[:] = [1, 2, 3, 4]
    t.d[2] = [5, 6, 7]
    rows = t.export_rows([2, 0])
    assert rows.dtype.names == ("a", "b", "d")
    u.import_rows([0, 1], rows)
    assert u.a.tolist() == [3, 1, 0, 0] and u.d[0].tolist() == [5, 6, 7]


def test_sparse_rows_allocate_on_first_use():
    block = Table()
    index = SparseRows(lambda ids: block.grow_arrays(ids.shape[0]))
    index.grow(10)
    assert not index.has().any()
    rows = index.rows([3, 7, 3], create=True)
    assert rows.tolist() == [0, 1, 0] and block.n_rows == 2
    assert index.has().tolist() == [i in (3, 7) for i in range(10)]


def test_string_column_packs_and_replaces():
    s = StringColumn()
    s.grow_arrays(3)
    assert s.get_many([0, 1, 2]) == [None] * 3
    s.set(0, 'W/"abc"')
    s.set(2, "\u00e9t\u00e9")
    s.set(0, 'W/"abc"')                              # unchanged: nothing appended
    assert len(s._blob) == 7 + 5
    for k in range(200_000):                          # old values are packed away in time
        s.set(1, f'"{k}"')
    assert s.get_many([0, 1, 2]) == ['W/"abc"', '"199999"', "\u00e9t\u00e9"]
    assert len(s._blob) < 2**21
    s.set(0, None)
    s.set(2, "x" * 5000)                              # absurdly long: not kept
    assert s.get(0) is None and s.get(2) is None


def test_buffers_grow_in_proportion_to_their_size():
    assert grown(100) == 166 and grown(100, spare=8) == 128
    assert room_for(50, 100) == 100                  # room enough: unchanged
    assert room_for(101, 100) == 166
    assert room_for(1000, 100) == 1000               # a large batch: exactly what it needs
    # rows added one at a time: few reallocations, so amortised O(1) copying
    buf, copies = np.zeros(0, dtype=np.int64), 0
    for n in range(10_000):
        bigger = with_room(buf, n, n + 1)
        if bigger is not buf:
            copies += n
            np.testing.assert_array_equal(bigger[:n], np.arange(n))
        buf = bigger
        buf[n] = n
    assert copies < 3 * 10_000

