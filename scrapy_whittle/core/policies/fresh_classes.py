"""The sources never crawled, in classes of sources alike, for the threshold form of a step's
choice (``reaching.ReachingTop``).

A source never crawled has the priority x = max(u w, m0 P[g] C): u times the epochs w since it
was added, or the population's prior P of its pooling group g times its prior weight m0 and
cost C where that is more (``ReachingTop._expected_at``). Sources with the same u, epoch added,
m0 and C form a class; within a class a group's sources share one priority at every epoch,
and every group whose prior is not above u w shares u w. Among equal priorities the choice
takes the lowest ids (``selection.select_top``), so of the sources of one priority only the
``k`` lowest eligible ids can be among the top ``k``. A crawl's start (the default's first
epochs over 10^5-10^6 feeds, pooled by host) has almost every source in one class; ranking
those few instead of all of them keeps a decision step from being a pass over every source.
"""

from __future__ import annotations

import numpy as np

_EMPTY = np.zeros(0, dtype=np.int64)


class _Run:
    """Ids ascending, some of which left; ``start``: the first still in (those before left:
    the lowest ids are crawled first)."""

    __slots__ = ("ids", "start")

    def __init__(self, ids: np.ndarray) -> None:
        self.ids, self.start = ids, 0

    def lowest(self, k: int, keep) -> np.ndarray:
        """The ``k`` lowest ids for which ``keep(chunk)`` (bool per id) holds."""
        ids, start = self.ids, self.start
        size = 2 * k
        while True:
            chunk = ids[start:start + size]
            got = chunk[keep(chunk)]
            if got.shape[0] >= k or start + size >= ids.shape[0]:
                return got[:k]
            size *= 4

    def skip_left(self, inside) -> bool:
        """Move ``start`` past the ids that left (``inside(chunk)``: bool per id still in);
        whether one is left."""
        ids, start = self.ids, self.start
        while start < ids.shape[0]:
            run = ids[start:start + 256]
            left = np.flatnonzero(inside(run))
            if left.size:
                start += int(left[0])
                break
            start += run.shape[0]
        self.start = start
        return start < ids.shape[0]


class FreshClasses:
    """The classes of the sources never crawled at :meth:`build`: per class its (u, epoch
    added, m0, C), its ids ascending, and per pooling group its ids ascending.

    A source leaves its class for good when its state changes (:meth:`changed`: a crawl, new
    estimates, a prior set for it); the caller ranks such sources one by one. ``label[i]``:
    source i's class, -1 outside every class."""

    #: more classes than this (per-source weights or hints, sources added one at a time):
    #: none is kept, and every source is ranked one by one
    MAX_CLASSES = 64
    #: more groups than this at one priority: their lowest ids are found in the class's ids
    #: rather than group by group
    FEW_GROUPS = 8

    def __init__(self) -> None:
        self.label = np.zeros(0, dtype=np.int32)
        self.group = np.zeros(0, dtype=np.int32)
        self.n_groups = 0
        self.params: np.ndarray = np.zeros((0, 4))       # per class: u, added, m0, C
        self.runs: list[_Run] = []                       # per class: its ids
        self.groups: list[np.ndarray] = []               # per class: its groups
        self.group_runs: list[list[_Run]] = []           # per class, per group: its ids

    @property
    def ready(self) -> bool:
        return bool(self.runs)

    def build(self, ids: np.ndarray, params: np.ndarray, group: np.ndarray, n: int) -> None:
        """Classes of sources ``ids`` (ascending) by ``params`` (rows aligned with ``ids``: u,
        epoch added, m0, C; equal where every column is equal), ``group`` their pooling
        groups; none where there are more than ``MAX_CLASSES``."""
        self.forget(n)
        if not ids.size:
            return
        varying = [params[:, j] for j in range(params.shape[1])
                   if not np.all(params[:, j] == params[0, j])]
        # by the parameters, then by id (stable; ids ascend); none varies: one class
        order = np.lexsort(varying[::-1]) if varying else np.arange(ids.shape[0])
        new = np.zeros(ids.shape[0], dtype=bool)
        new[0] = True
        for col in varying:
            c = col[order]
            new[1:] |= c[1:] != c[:-1]            # (NaN: a class of its own)
        starts = np.flatnonzero(new)
        if starts.shape[0] > self.MAX_CLASSES:
            return
        self.group = np.zeros(n, dtype=np.int32)
        self.group[ids] = group
        self.n_groups = int(group.max()) + 1
        self.params = params[order[starts]]
        for c, members in enumerate(np.split(ids[order], starts[1:])):
            self.label[members] = c
            self.runs.append(_Run(members))
            g = self.group[members]
            by_group = np.argsort(g, kind="stable")
            cuts = np.flatnonzero(np.diff(g[by_group])) + 1
            self.groups.append(g[by_group][np.concatenate([[0], cuts])])
            self.group_runs.append([_Run(m) for m in np.split(members[by_group], cuts)])

    def forget(self, n: int) -> None:
        self.label = np.full(n, -1, dtype=np.int32)
        self.runs, self.groups, self.group_runs = [], [], []

    def changed(self, ids) -> None:
        """Sources ``ids`` leave their classes."""
        if self.runs:
            ids = np.asarray(ids, dtype=np.int64).reshape(-1)
            self.label[ids[ids < self.label.shape[0]]] = -1

    def in_class(self, ids) -> np.ndarray:
        """bool per source of ``ids`` (an index array or ``slice(None)``): in some class."""
        return self.label[ids] >= 0

    def candidates(self, epoch: float, pooled: np.ndarray, k: int,
                   eligible: np.ndarray | None) -> np.ndarray:
        """The sources still in a class that may be among the top ``k`` at ``epoch``
        (``pooled``: the population's prior per group): of each priority, from the highest
        down until ``k`` are found, its ``k`` lowest eligible ids."""
        out = []
        label = self.label
        for c, run in enumerate(self.runs):

            def inside(chunk, c=c):
                return label[chunk] == c

            def keep(chunk, c=c):
                ok = label[chunk] == c
                return ok if eligible is None else ok & eligible[chunk]

            if not run.skip_left(inside):
                continue
            u, added, m0, cost = self.params[c].tolist()
            a = u * (0.0 if added == -np.inf else max(epoch - added, 0.0))
            groups = self.groups[c]
            b = m0 * pooled[groups] * cost
            prio = np.where(b > a, b, a)

            found = 0
            levels = np.unique(prio)[::-1]         # each priority, from the highest
            for level in levels:
                at = np.flatnonzero(prio == level)
                if at.shape[0] > self.FEW_GROUPS:   # many groups: the class's ids, filtered
                    among = np.zeros(self.n_groups, dtype=bool)
                    among[groups[at]] = True
                    got = run.lowest(k, lambda chunk, keep=keep, among=among:
                                     keep(chunk) & among[self.group[chunk]])
                else:
                    runs = [self.group_runs[c][j] for j in at.tolist()]
                    got = np.concatenate([r.lowest(k, keep) for r in runs
                                          if r.skip_left(inside)] or [_EMPTY])
                out.append(got)
                found += got.shape[0]
                if found >= k:
                    break
        return np.concatenate(out) if out else _EMPTY
