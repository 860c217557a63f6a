"""Per-source arrays that grow together, and their rows for the state store.

Everything the crawl knows per source (a policy's state, an estimator's sufficient statistics,
the source table's book-keeping) lives in numpy arrays indexed by source id. This module is
the one mechanism for them:

* a class declares its arrays in ``per_source`` (name -> fill value, or a :class:`Col` giving
  the dtype, a trailing width for 2-D arrays, and whether the column is persisted);
* :meth:`PerSourceArrays.grow_arrays` adds sources at the end. Arrays are views on buffers with
  spare capacity, so sources registered one at a time cost amortised O(1), not O(N) each;
* :meth:`export_rows` / :meth:`import_rows` move the persisted columns of some sources (and of
  the sub-objects named by ``_row_children``) as one numpy structured array, so the state store
  writes only the sources that changed, one fixed-size record each.

:class:`SparseRows` maps sources to the rows of a dense block that only some sources use (a
decay estimator's grid kept for count-only sources, say), so the many sources that never need
it cost four bytes each instead of the block's width.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from scrapy_whittle.core.distinct import distinct


def grown(size: int, *, spare: int = 2) -> int:
    """The size a buffer of ``size`` rows grows to when full: a ``1/spare`` part of itself and
    16 rows more. Growing in proportion to the size makes rows added one at a time cost
    amortised O(1); a larger ``spare`` trades more copying for less unused room."""
    return size + size // spare + 16


def room_for(need: int, capacity: int, *, spare: int = 2) -> int:
    """The capacity a buffer of ``capacity`` rows must have to hold ``need``: unchanged when it
    does, else :func:`grown`, or ``need`` if that is more."""
    return capacity if need <= capacity else max(need, grown(capacity, spare=spare))


def with_room(buf: np.ndarray, used: int, need: int, *, spare: int = 2) -> np.ndarray:
    """``buf`` when it has room for ``need`` rows, else a larger buffer (:func:`room_for`)
    holding a copy of its first ``used`` rows; the rows after those are not initialised."""
    capacity = room_for(need, buf.shape[0], spare=spare)
    if capacity == buf.shape[0]:
        return buf
    grown = np.empty((capacity, *buf.shape[1:]), dtype=buf.dtype)
    grown[:used] = buf[:used]
    return grown


def dtype_from_descr(descr: list) -> np.dtype:
    """The structured dtype of a JSON-decoded ``dtype.descr`` (lists back to tuples)."""
    return np.dtype([(f[0], f[1]) if len(f) == 2 else (f[0], f[1], tuple(f[2]))
                     for f in descr])


class Col:
    """Declaration of one per-source array."""

    __slots__ = ("dtype", "fill", "persist", "width")

    def __init__(self, fill: Any, dtype: Any = None, *, width: int = 0,
                 persist: bool = True) -> None:
        self.fill = fill
        self.dtype = np.dtype(dtype) if dtype is not None else np.asarray(fill).dtype
        self.width = int(width)
        self.persist = persist

    @classmethod
    def of(cls, decl: Any) -> Col:
        return decl if isinstance(decl, Col) else cls(decl)


class PerSourceArrays:
    """Mixin: the arrays of ``per_source`` (see the module docstring), of length ``n_rows``.

    Subclasses call ``_init_arrays(n)`` once, ``grow_arrays(k)`` to add k rows, and may name
    sub-objects whose rows belong to theirs in ``_row_children()`` (prefix -> object).
    """

    per_source: ClassVar[dict[str, Any]] = {}

    def _columns(self) -> dict[str, Col]:
        return {name: Col.of(decl) for name, decl in self.per_source.items()}

    def _init_arrays(self, n: int) -> None:
        self._cols = self._columns()
        self._buffers: dict[str, np.ndarray] = {}
        self._n_rows = 0
        self._capacity = 0
        for name, col in self._cols.items():
            shape = (0, col.width) if col.width else (0,)
            self._buffers[name] = np.zeros(shape, dtype=col.dtype)
            setattr(self, name, self._buffers[name])
        self.grow_arrays(int(n))

    @property
    def n_rows(self) -> int:
        return self._n_rows

    def grow_arrays(self, k: int) -> np.ndarray:
        """Add ``k`` rows filled with their declared values; returns their indices."""
        start = self._n_rows
        if k <= 0:
            return np.arange(start, start, dtype=np.int64)
        need = start + k
        capacity = room_for(need, self._capacity)
        grow = capacity != self._capacity
        for name, col in self._cols.items():
            buf, current = self._buffers[name], getattr(self, name)
            if grow or current.base is not buf:
                # a column the owner replaced by a new array is taken over as it is
                if grow:
                    shape = (capacity, col.width) if col.width else (capacity,)
                    buf = self._buffers[name] = np.empty(shape, dtype=col.dtype)
                buf[:start] = current[:start]
            buf[start:need] = col.fill
            setattr(self, name, buf[:need])
        self._capacity = capacity
        self._n_rows = need
        return np.arange(start, need, dtype=np.int64)

    # -- rows for the state store ---------------------------------------------------------
    def _row_children(self) -> dict[str, PerSourceArrays]:
        return {}

    def row_dtype(self) -> np.dtype:
        """Structured dtype of one persisted row (own columns, then children, prefixed)."""
        fields: list[tuple] = []
        for name, col in self._cols.items():
            if col.persist:
                fields.append((name, col.dtype, (col.width,)) if col.width
                              else (name, col.dtype))
        for prefix, child in self._row_children().items():
            for name in child.row_dtype().names or ():
                sub = child.row_dtype().fields[name][0]
                fields.append((f"{prefix}.{name}", sub))
        return np.dtype(fields)

    def export_rows(self, ids) -> np.ndarray:
        """The persisted columns of rows ``ids`` as one structured array."""
        ids = np.asarray(ids, dtype=np.int64)
        out = np.empty(ids.shape[0], dtype=self.row_dtype())
        self._fill_rows(out, ids, "")
        return out

    def _fill_rows(self, out: np.ndarray, ids: np.ndarray, prefix: str) -> None:
        for name, col in self._cols.items():
            if col.persist:
                out[prefix + name] = getattr(self, name)[ids]
        for child_prefix, child in self._row_children().items():
            child._fill_rows(out, child._child_ids(ids), f"{prefix}{child_prefix}.")

    def import_rows(self, ids, rows: np.ndarray) -> None:
        """Write ``rows`` (from :meth:`export_rows`, possibly of an older layout: fields
        missing from it keep their current values) into rows ``ids``."""
        ids = np.asarray(ids, dtype=np.int64)
        self._take_rows(rows, ids, "")
        self._after_import()

    def _take_rows(self, rows: np.ndarray, ids: np.ndarray, prefix: str) -> None:
        names = set(rows.dtype.names or ())
        for name, col in self._cols.items():
            if col.persist and prefix + name in names:
                getattr(self, name)[ids] = rows[prefix + name]
        for child_prefix, child in self._row_children().items():
            child._take_rows(rows, child._child_ids(ids), f"{prefix}{child_prefix}.")
            child._after_import()

    # -- sparse blocks ---------------------------------------------------------------------
    def _sparse_children(self) -> dict[str, tuple[SparseRows, PerSourceArrays]]:
        """name -> (index, block) of the blocks only some rows use (see :class:`SparseRows`)."""
        return {}

    def export_blocks(self, ids) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """For every sparse block (here and in the children, names prefixed like columns):
        (the ids among ``ids`` that have a row in it, their rows as a structured array)."""
        out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._collect_blocks(out, np.asarray(ids, dtype=np.int64), "")
        return out

    def _collect_blocks(self, out: dict, ids: np.ndarray, prefix: str) -> None:
        for name, (index, block) in self._sparse_children().items():
            sub = ids[index.has(ids)]
            if sub.size:
                out[prefix + name] = (sub, block.export_rows(index.row[sub]))
        for child_prefix, child in self._row_children().items():
            child._collect_blocks(out, ids, f"{prefix}{child_prefix}.")

    def block_dtypes(self) -> dict[str, np.dtype]:
        """name -> row dtype of every sparse block (names as in :meth:`export_blocks`)."""
        out = {name: block.row_dtype() for name, (_, block) in self._sparse_children().items()}
        for prefix, child in self._row_children().items():
            out.update({f"{prefix}.{k}": v for k, v in child.block_dtypes().items()})
        return out

    def import_blocks(self, blocks: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
        """Inverse of :meth:`export_blocks` (rows are allocated where missing)."""
        for key, (ids, rows) in blocks.items():
            owner, name = self, key
            while name not in owner._sparse_children():
                head, _, name = name.partition(".")
                owner = owner._row_children().get(head)
                if owner is None or not name:
                    break
            else:
                index, block = owner._sparse_children()[name]
                block.import_rows(index.rows(ids, create=True), rows)
                owner._after_import()

    def _child_ids(self, ids: np.ndarray) -> np.ndarray:
        """Row indices of this object for the parent's rows ``ids`` (identity by default)."""
        return ids

    def _after_import(self) -> None:
        """Hook: invalidate caches after rows were imported."""


def unusable_rows(arrays: PerSourceArrays, rows) -> np.ndarray:
    """bool per row of ``rows``: some persisted floating-point column holds a number that is
    not finite where it should be (NaN is allowed only in a column whose fill value is NaN,
    such as "time of the last crawl: never"; +-inf nowhere). The usual answer, none, is
    found with one check over all the columns' values together."""
    rows = np.asarray(rows, dtype=np.int64)
    bad = np.zeros(rows.shape[0], dtype=bool)
    if not rows.size:
        return bad
    finite, not_inf = [], []
    for name, col in arrays._cols.items():
        if col.persist and col.dtype.kind == "f":
            (not_inf if np.isnan(col.fill) else finite).append(
                getattr(arrays, name)[rows].reshape(rows.shape[0], -1))
    wrong = []
    if finite:
        values = np.concatenate(finite, axis=1)
        if not np.isfinite(values).all():
            wrong.append(~np.isfinite(values))
    if not_inf:
        values = np.concatenate(not_inf, axis=1)
        if np.isinf(values).any():
            wrong.append(np.isinf(values))
    for w in wrong:
        bad |= w.any(axis=1)
    return bad


def refill_rows(arrays: PerSourceArrays, rows, keep: tuple[str, ...] = ()) -> None:
    """Set rows ``rows`` of every column but ``keep`` back to its declared fill value."""
    rows = np.asarray(rows, dtype=np.int64)
    if not rows.size:
        return
    for name, col in arrays._cols.items():
        if name not in keep:
            getattr(arrays, name)[rows] = col.fill


class KeptRows:
    """Per-source arrays derived from a state, kept between uses and recomputed only for the
    rows marked changed since (read-only to callers).

    ``compute(ids)`` returns the arrays for sources ``ids`` (an index array, or
    ``slice(None)`` for all) computing each row from that source's state only, so that a
    row recomputed alone equals the row of a full computation."""

    def __init__(self, compute) -> None:
        self._compute = compute
        self._arrays: tuple[np.ndarray, ...] | None = None
        self._stale: list[np.ndarray] = []

    def get(self, n: int) -> tuple[np.ndarray, ...]:
        """The arrays of the ``n`` sources, up to date."""
        if self._arrays is None or self._arrays[0].shape[0] != n:
            self._arrays, self._stale = self._compute(slice(None)), []
            for arr in self._arrays:
                arr.flags.writeable = False
        elif self._stale:
            ids = distinct(np.concatenate(self._stale))
            self._stale = []
            for arr, new in zip(self._arrays, self._compute(ids), strict=True):
                arr.flags.writeable = True
                arr[ids] = new
                arr.flags.writeable = False
        return self._arrays

    def changed(self, ids) -> None:
        """The state of sources ``ids`` changed: their rows are recomputed at the next get."""
        if self._arrays is not None:
            self._stale.append(np.asarray(ids, dtype=np.int64).reshape(-1))

    def forget(self) -> None:
        """Everything is recomputed at the next get (sources added, a state imported)."""
        self._arrays, self._stale = None, []


class SparseRows:
    """Source id -> row of a block that only some sources use (-1: none yet).

    ``rows(ids, create=True)`` allocates rows for the sources that have none, through the
    ``allocate(source_ids)`` callback of the block's owner (which grows its arrays by one row
    per source, with that source's priors, and returns the new rows' indices)."""

    def __init__(self, allocate) -> None:
        self._allocate = allocate
        self.row = np.zeros(0, dtype=np.int32)
        self._buf = self.row

    def grow(self, k: int) -> None:
        n = self.row.shape[0]
        self._buf = with_room(self._buf, n, n + k)
        self._buf[n:n + k] = -1
        self.row = self._buf[:n + k]

    def rows(self, ids, create: bool = False) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        r = self.row[ids]
        if create and np.any(r < 0):
            missing = distinct(ids[r < 0])
            self.row[missing] = self._allocate(missing)
            r = self.row[ids]
        return r.astype(np.int64)

    def has(self, ids=None) -> np.ndarray:
        return (self.row if ids is None else self.row[np.asarray(ids, dtype=np.int64)]) >= 0


class StringColumn(PerSourceArrays):
    """One optional string per source (an ETag), packed in a byte string: 6 bytes a source
    plus the string's UTF-8 bytes, where a Python string would cost 49 bytes more. A string
    replaced leaves its old bytes behind until they outweigh the live ones, then the column
    is packed again. Strings longer than ``max_length`` bytes are not kept (None)."""

    per_source = {"_off": Col(0, np.uint32), "_len": Col(0, np.uint16)}
    max_length = 4096

    def __init__(self) -> None:
        self._blob = bytearray()
        self._garbage = 0
        self._init_arrays(0)

    def get(self, i: int) -> str | None:
        n = int(self._len[i])
        if not n:
            return None
        o = int(self._off[i])
        return self._blob[o:o + n].decode("utf-8", "surrogatepass")

    def get_many(self, ids) -> list[str | None]:
        return [self.get(i) for i in np.asarray(ids, dtype=np.int64).tolist()]

    def set(self, i: int, value: str | None) -> None:
        raw = value.encode("utf-8", "surrogatepass") if value else b""
        n_old = int(self._len[i])
        if n_old == len(raw) and n_old:
            o = int(self._off[i])
            if self._blob[o:o + n_old] == raw:
                return
        self._garbage += n_old
        if not raw or len(raw) > self.max_length:
            self._off[i] = self._len[i] = 0
            return
        if len(self._blob) + len(raw) >= 2**32:
            self._pack()
        self._off[i] = len(self._blob)
        self._len[i] = len(raw)
        self._blob += raw
        if self._garbage > 2**20 and self._garbage > len(self._blob) - self._garbage:
            self._pack()

    def _pack(self) -> None:
        live = np.flatnonzero(self._len)
        parts, off = [], 0
        for i in live.tolist():
            o, n = int(self._off[i]), int(self._len[i])
            parts.append(self._blob[o:o + n])
            self._off[i] = off
            off += n
        self._blob = bytearray(b"".join(parts))
        self._garbage = 0
