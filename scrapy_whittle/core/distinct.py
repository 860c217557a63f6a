"""Distinct values of integer arrays (source ids, URL hashes), by sorting.

``np.unique`` gives the same answers, but numpy 2.3+ finds them with a hash table before
sorting them, many times slower than a sort alone both for the million URL hashes that the
registry checks at every start-up and restore and for the hundred source ids of an epoch's
batch (several calls an epoch). These functions sort and compare neighbours; their results
equal ``np.unique``'s (tested).
"""

from __future__ import annotations

import numpy as np


def distinct(values) -> np.ndarray:
    """``np.unique(values)``: the distinct values, sorted."""
    s = np.sort(np.asarray(values).ravel())
    if s.shape[0] < 2:
        return s
    keep = np.empty(s.shape[0], dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def all_distinct(values) -> bool:
    """No value occurs twice."""
    s = np.sort(np.asarray(values).ravel())
    return not bool((s[1:] == s[:-1]).any())


def first_of_each(values) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_index=True)``: the distinct values, sorted, and the index
    of the first occurrence of each."""
    values = np.asarray(values).ravel()
    order = np.argsort(values, kind="stable")
    s = values[order]
    keep = np.empty(s.shape[0], dtype=bool)
    if s.shape[0]:
        keep[0] = True
        np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep], order[keep]
