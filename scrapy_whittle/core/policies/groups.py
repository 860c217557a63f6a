"""Arms made of groups of sources, crawled round-robin inside a group.

*Deep Reinforcement Learning for Web Crawling* (Avrachenkov, Borkar & Patil, ICC 2021),
Section II: pages with similar behaviour form a group, each group is one arm of the bandit,
and when an arm is chosen the next page of the group is crawled through a pointer M_k that
advances cyclically ("if all the pages are crawled in the group, the pointer is set to 0").

* :func:`arm_of_sources` maps sources to arms: ``problem.groups`` when given (relabelled to
  0..K-1 in order of first appearance), otherwise one arm per source, or, when there are more
  sources than ``max_arms``, clusters of sources (:func:`cluster_sources`, 1-D k-means of
  log estimated rates, or contiguous id blocks when no estimates exist yet).
* :class:`RoundRobinArms` holds the members of every arm and the pointers, picks the page to
  crawl for chosen arms, grows, and saves its pointers.
"""

from __future__ import annotations

import numpy as np

from scrapy_whittle.core.selection import select_top


def cluster_sources(n: int, k: int, rates: np.ndarray | None = None, iters: int = 50
                    ) -> np.ndarray:
    """Arm id (0..k-1) of each of ``n`` sources.

    With ``rates`` (estimated change or publishing rates, > 0), a deterministic 1-D k-means on
    log(rate) started from the quantiles, so sources of similar rate share an arm; arms are
    numbered by increasing rate. Without rates, contiguous blocks of ids (``i * k // n``).
    """
    k = max(1, min(int(k), n)) if n else 1
    if rates is None or n == 0:
        return (np.arange(n) * k // max(n, 1)).astype(np.int64)
    z = np.log(np.maximum(np.asarray(rates, dtype=np.float64), 1e-12))
    centres = np.quantile(z, (np.arange(k) + 0.5) / k)
    labels = np.zeros(n, dtype=np.int64)
    for _ in range(iters):
        labels = np.argmin(np.abs(z[:, None] - centres[None, :]), axis=1)
        new = centres.copy()
        for j in range(k):
            members = z[labels == j]
            if members.size:
                new[j] = members.mean()
        if np.allclose(new, centres):
            break
        centres = new
    # renumber by increasing centre and drop empty clusters
    used = np.unique(labels)
    order = used[np.argsort(centres[used], kind="stable")]
    remap = np.empty(k, dtype=np.int64)
    remap[order] = np.arange(order.size)
    return remap[labels]


def arm_of_sources(problem, max_arms: int | None = None, rates: np.ndarray | None = None
                   ) -> np.ndarray:
    """Arm id of every source of ``problem`` (see the module docstring)."""
    n = problem.n
    if problem.groups is not None:
        _, first, inverse = np.unique(problem.groups, return_index=True, return_inverse=True)
        # relabel groups 0..K-1 in order of first appearance (stable, readable)
        rank = np.empty(first.size, dtype=np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(first.size)
        return rank[inverse].astype(np.int64)
    if max_arms is None or n <= max_arms:
        return np.arange(n, dtype=np.int64)
    return cluster_sources(n, max_arms, rates)


class RoundRobinArms:
    """Members of each arm and the round-robin pointer M_k of each arm.

    arm: int64[N], the arm of every source (0..K-1, every arm non-empty).
    """

    def __init__(self, arm: np.ndarray) -> None:
        self.arm = np.asarray(arm, dtype=np.int64).copy()
        self.k = int(self.arm.max()) + 1 if self.arm.size else 0
        self._rebuild()
        self.pointer = np.zeros(self.k, dtype=np.int64)

    def _rebuild(self) -> None:
        order = np.argsort(self.arm, kind="stable")
        counts = np.bincount(self.arm, minlength=self.k)
        self.offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.members = order.astype(np.int64)   # members of arm j: members[off[j]:off[j+1]]
        # one arm per source, arm i = source i (a Scrapy crawl without groups): the next page
        # of arm i is always source i and the pointers stay at 0, so ``select`` skips them
        self.one_per_source = bool(self.k == self.arm.size
                                   and np.array_equal(self.arm, np.arange(self.k)))

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def current(self, arms: np.ndarray) -> np.ndarray:
        """The source each arm's pointer designates now (without advancing)."""
        arms = np.asarray(arms, dtype=np.int64)
        return self.members[self.offsets[arms] + self.pointer[arms] % self.sizes[arms]]

    def advance(self, arms: np.ndarray) -> None:
        arms = np.asarray(arms, dtype=np.int64)
        self.pointer[arms] = (self.pointer[arms] + 1) % self.sizes[arms]

    def pick(self, arms: np.ndarray) -> np.ndarray:
        """Sources to crawl for the chosen ``arms`` (next page of each), pointers advanced."""
        sources = self.current(arms)
        self.advance(arms)
        return sources

    def select(self, priority: np.ndarray, cost: np.ndarray, budget: float,
               eligible: np.ndarray | None = None) -> np.ndarray:
        """Top arms by ``priority`` whose next pages fit in ``budget``; returns source ids.
        An arm whose next page may not be crawled now (``eligible``) waits."""
        if self.k == 0:
            return np.zeros(0, dtype=np.int64)
        if self.one_per_source:        # the same choice, without the arms' book-keeping
            return select_top(priority, np.asarray(cost), budget, eligible)
        nxt = self.current(np.arange(self.k))
        arms = select_top(priority, np.asarray(cost)[nxt], budget,
                          None if eligible is None else eligible[nxt])
        return self.pick(arms)

    def add_sources(self, arm_of_new: np.ndarray) -> None:
        """Append sources (ids continue after the existing ones) with the given arms; arms
        beyond the current K are created."""
        arm_of_new = np.asarray(arm_of_new, dtype=np.int64)
        self.arm = np.concatenate([self.arm, arm_of_new])
        k_new = int(self.arm.max()) + 1 if self.arm.size else 0
        if k_new > self.k:
            self.pointer = np.concatenate([self.pointer, np.zeros(k_new - self.k, np.int64)])
            self.k = k_new
        self._rebuild()
