"""Choosing the sources to crawl in one epoch from their priorities, under a budget."""

from __future__ import annotations

import math

import numpy as np


def select_top(priority: np.ndarray, cost: np.ndarray | None, budget: float,
               eligible: np.ndarray | None = None) -> np.ndarray:
    """Indices of the highest-priority sources whose total cost fits in ``budget``.

    Sources are taken in decreasing priority while the running total of their costs stays
    within the budget; a source that does not fit is passed over and cheaper ones after it
    may still be taken (greedy knapsack fill, the natural reading of the papers'
    "choose a number of top sources for the constraint to be reached"). Ties are broken by
    the lower index, so the choice is deterministic. With unit costs this is a top-k in
    O(N) (``argpartition``); the full sort only touches the candidates.

    ``eligible`` (bool[N]) masks out sources that may not be crawled now (politeness, a
    source still being fetched).
    """
    priority = np.asarray(priority, dtype=np.float64)
    n = priority.shape[0]
    if n == 0 or budget <= 0:
        return np.zeros(0, dtype=np.int64)
    if eligible is not None:
        candidates = np.flatnonzero(eligible)
        prio = priority[candidates]
    else:
        candidates = None
        prio = priority
    m = prio.shape[0]
    if m == 0:
        return np.zeros(0, dtype=np.int64)
    unit = cost is None or (np.ndim(cost) == 0 and float(cost) == 1.0)
    if unit:
        k_max = min(m, int(np.floor(budget + 1e-9)))
    else:
        c = np.asarray(cost, dtype=np.float64)
        c = c if candidates is None or c.ndim == 0 else c[candidates]
        cmin = float(np.min(c)) if c.ndim else float(c)
        k_max = min(m, int(np.floor(budget / cmin + 1e-9)))
    if k_max <= 0:
        return np.zeros(0, dtype=np.int64)
    if k_max < m:
        # the k_max largest: those above the k_max-th largest value, then those equal to it
        # from the lowest index on (ties go to the lower index)
        kth = _shared_kth_largest(prio, k_max)
        if kth is None:
            # argpartition puts the k_max largest first (in any order)
            part = np.argpartition(-prio, k_max - 1)[:k_max]
            kth = prio[part].min()
            if kth != kth:
                # NaN priorities had to be taken (fewer numbers than k_max): they rank below
                # every number, among themselves by index
                prio = np.where(np.isnan(prio), -np.inf, prio)
                part = np.argpartition(-prio, k_max - 1)[:k_max]
                kth = prio[part].min()
            above = part[prio[part] > kth]
        else:
            above = np.flatnonzero(prio > kth)
        tied = np.flatnonzero(prio == kth)
        top = np.concatenate([above, tied[: k_max - above.shape[0]]])
    else:
        top = np.arange(m)
    order = np.lexsort((top, -prio[top]))
    top = top[order]
    if not unit:
        c_top = c[top] if c.ndim else np.full(top.shape[0], float(c))
        if np.sum(c_top) > budget:
            keep = np.zeros(top.shape[0], dtype=bool)
            left = float(budget)
            for j, cj in enumerate(c_top):  # candidates only: at most budget / min cost
                if cj <= left + 1e-12:
                    keep[j] = True
                    left -= cj
            top = top[keep]
    return top if candidates is None else candidates[top]


#: values sampled to recognise a k-th largest value that many sources share
TIE_SAMPLE = 256


def _shared_kth_largest(prio: np.ndarray, k: int) -> float | None:
    """The k-th largest of ``prio`` when many elements share it, else None (not looked for).

    A selection often cuts through a mass of equal priorities (at a crawl's start every
    unexplored source has the same one), and ``argpartition`` is slow on those: several
    times its usual cost. A strided sample (sorted) says
    where the k-th largest should be, give or take its sampling error; a sample value near
    there shared by a twentieth of the sample is checked exactly, with two counting passes.
    Anything else (no mass there, or a guess off the mark) answers None."""
    m = prio.shape[0]
    step = max(1, m // TIE_SAMPLE)
    sample = np.sort(prio[::step])[::-1]              # descending (NaN first: never a guess)
    size = sample.shape[0]
    j = (k - 1) / step                                 # where the k-th falls in the sample
    spread = 2.0 * np.sqrt(j + 1.0) + 2.0               # ~ its sampling error, generously
    tried = set()
    for rank in (j, j - spread, j + spread):
        guess = float(sample[min(max(int(rank), 0), size - 1)])
        if guess in tried or not 20 * np.count_nonzero(sample == guess) >= size:
            continue
        tried.add(guess)
        above = int(np.count_nonzero(prio > guess))
        if above < k <= above + int(np.count_nonzero(prio == guess)):
            return guess
    return None


class TopSelector:
    """``select_top`` with memory, for policies that choose every epoch among many sources.

    Priorities move little from one epoch to the next, so the previous epoch's cut-off (the
    k-th largest priority) is a good guess for this one: one comparison pass keeps the
    sources at or above a slightly lowered guess, and only those are partitioned. When the
    guess keeps too few sources the full ``select_top`` runs. The result is always exactly
    what ``select_top`` returns.
    """

    __slots__ = ("_cut",)

    def __init__(self) -> None:
        self._cut: float | None = None

    def __call__(self, priority: np.ndarray, cost: np.ndarray | None, budget: float,
                 eligible: np.ndarray | None = None) -> np.ndarray:
        unit = cost is None
        k = int(np.floor(budget + 1e-9)) if unit else 0
        n = priority.shape[0]
        if not unit or eligible is not None or k <= 0 or k >= n or self._cut is None:
            chosen = select_top(priority, cost, budget, eligible)
        else:
            guess = self._cut - 1e-9 * abs(self._cut)
            cand = np.flatnonzero(priority >= guess)
            if cand.shape[0] < k:
                chosen = select_top(priority, None, budget)
            else:
                chosen = cand[select_top(priority[cand], None, budget)]
        if unit and chosen.shape[0]:
            self._cut = float(priority[chosen].min())
        return chosen


#: the cut-off of a pruned selection is guessed this much below the last one
PRUNE_MARGIN = 0.05


class PrunedTop:
    """The top M (unit costs) of priorities that never exceed a bound known for every source,
    computing the priorities only where the bound can reach the top.

    Priorities move little from one epoch to the next, so the last selection's cut-off (its
    M-th priority), lowered by ``margin``, is a good guess for this one: a source whose bound
    is below the guess cannot be chosen as long as the top M of the others all clear it.
    When they do not, their M-th priority is still a lower bound of the true one (computing
    more sources can only raise it), and the sources whose bound reaches it settle the
    choice in a second pass. Where the guess lies above the M-th largest bound (fewer than M
    sources reach it: the cut-off fell, as it does in every epoch of Thompson sampling's
    steady state, whose draws move the top by more than the margin), the M-th largest bound
    is the guess instead: where the chosen sources sit at their bound (saturated), M
    priorities settle the choice. Either way the answer is exactly ``select_top`` over every
    priority (ties to the lower index: the pruned sources are strictly below the cut).
    Without a last cut-off the caller computes every priority: at a crawl's start the bound
    of a source crawled an epoch ago is far above its priority, and guessing from the bounds
    alone costs more passes than it saves (measured).

    margin: how far below the last cut-off the guess is (``PRUNE_MARGIN`` by default).
    max_share: above this share of the sources in the first pass, computing them all costs
        about the same: the caller's full computation runs instead.
    tight: the bounds of the sources near the top are nearly their priorities (saturated,
        and diurnal-whittle's bound under the rhythm of a source crawled days ago). Where
        more than 2M sources reach the lowered guess (the cut-off rose: the guess lets in
        everything within the margin), a little below the M-th largest of their bounds
        (estimated from a sample) is the guess: about 5M / 4 priorities, and a second pass
        over the few between it and the M-th priority, settle the choice. Where the bounds
        are loose after all (sources crawled an epoch or two ago, at a crawl's start), the
        M-th priority lies far below that guess: each later pass reaches about twice as
        many sources as the last (or the M-th priority found, where that is higher), so
        the passes rank no more than a few times the sources that settle the choice.
    """

    __slots__ = ("cut", "decisions", "margin", "max_share", "tight")

    def __init__(self, margin: float = PRUNE_MARGIN, max_share: float = 0.5,
                 tight: bool = False) -> None:
        self.margin = float(margin)
        self.max_share = float(max_share)
        self.tight = bool(tight)
        self.cut: float | None = None
        self.decisions = 0                     # selections decided here (diagnostics)

    def __call__(self, bound: np.ndarray, priority_of, budget: float,
                 eligible: np.ndarray | None = None) -> np.ndarray | None:
        """The top M by priority (``priority_of(ids)``: the priorities of sources ``ids``,
        each at most ``bound[id]``), or None where it is not decided here (no cut-off yet,
        too many candidates, bounds of zero or NaN at the top): then the caller computes
        every priority and calls :meth:`settled`."""
        n = bound.shape[0]
        k = int(np.floor(budget + 1e-9))
        if self.cut is None or not self.cut > 0 or not 0 < k < n:
            return None
        threshold = self.cut * (1.0 - self.margin)
        cand = _reaching(bound, threshold, eligible)
        if self.tight and cand.shape[0] > 2 * k:
            # the bounds are nearly the priorities at the top: where the cut-off rose, a
            # little below the M-th largest bound of the sources reaching the guess is the
            # better guess
            guess = _below_kth_bound(bound, cand, k)
            if guess > threshold:
                threshold = guess
                cand = cand[bound[cand] >= threshold] if 2 * cand.shape[0] < n else \
                    _reaching(bound, threshold, eligible)
        if cand.shape[0] < k:             # the guess is above the M-th largest bound
            threshold = _kth_largest_bound(bound, k, eligible)
            if not threshold > 0:         # (NaN, fewer than M eligible, or nothing to prune)
                return None
            cand = _reaching(bound, threshold, eligible)
        prio = None
        ladder = None
        for attempt in range(n + 1):          # (it ends: a pass at the M-th priority settles)
            if attempt:                       # (the first pass's priorities are kept)
                cand, prio = _widened(bound, threshold, eligible, cand, prio, priority_of)
            if cand.shape[0] < k or (attempt == 0 and cand.shape[0] > self.max_share * n):
                return None
            if not attempt:
                prio = priority_of(cand)
            top = select_top(prio, None, budget)
            last = float(prio[top[-1]])
            if last >= threshold:               # nothing pruned could have made it
                self.cut = last
                self.decisions += 1
                return cand[top]
            if not last > 0:
                return None
            # sources reaching the M-th priority found settle the choice, but where it lies
            # far below the pass's threshold (the cut-off fell, or the bounds of many sources
            # are loose) they are most of them: about twice this pass's sources, where that
            # asks less, may settle it already (their M-th priority can only be higher)
            if ladder is None:
                ladder = _ladder(bound, eligible)
            wider = max(last, _reached_by(ladder, 2 * cand.shape[0]))
            # a guess no lower than this pass's (the sampled bounds all lie above the M-th
            # priority: a mask or NaN bounds left only high ones in the sample) would pass
            # over the same sources again: the M-th priority itself settles it
            threshold = wider if wider < threshold else last
        return None

    def settled(self, priority: np.ndarray, chosen: np.ndarray) -> None:
        """A selection computed in full chose ``chosen``: its cut-off."""
        self.cut = float(np.min(priority[chosen])) if chosen.shape[0] else None

    def forget(self) -> None:
        """Priorities changed beyond the margin's reach (sources reset, costs changed)."""
        self.cut = None


def _reaching(bound: np.ndarray, threshold: float, eligible: np.ndarray | None) -> np.ndarray:
    """Sources (eligible ones) whose bound reaches ``threshold``."""
    keep = bound >= threshold
    if eligible is not None:
        keep &= eligible
    return np.flatnonzero(keep)


def _widened(bound, threshold, eligible, cand, prio, priority_of):
    """(sources reaching ``threshold``, their priorities), where ``threshold`` is below the
    first pass's: a superset of its sources ``cand`` (sorted), whose priorities ``prio``
    are kept (a priority is computed element by element: the same either way)."""
    wider = _reaching(bound, threshold, eligible)
    at = np.minimum(np.searchsorted(cand, wider), cand.shape[0] - 1)
    known = cand[at] == wider
    out = np.empty(wider.shape[0])
    out[known] = prio[at[known]]
    if not known.all():
        out[~known] = priority_of(wider[~known])
    return wider, out


#: values of the bounds sampled to guess the thresholds of a widening selection
LADDER = 1024


def _ladder(bound: np.ndarray, eligible: np.ndarray | None) -> tuple[np.ndarray, int]:
    """(every s-th bound of the (eligible) sources, in decreasing order, s): about
    ``LADDER`` values, to guess how far a given number of sources reaches."""
    step = max(1, bound.shape[0] // LADDER)
    sample = bound[::step]
    if eligible is not None:
        sample = sample[eligible[::step]]
    return np.sort(sample[~np.isnan(sample)])[::-1], step


def _reached_by(ladder: tuple[np.ndarray, int], count: int) -> float:
    """About the ``count``-th largest bound (from ``_ladder``); -inf where none is known."""
    sample, step = ladder
    if not sample.shape[0]:
        return -math.inf
    return float(sample[min(count // step, sample.shape[0] - 1)])


def _below_kth_bound(bound: np.ndarray, cand: np.ndarray, k: int) -> float:
    """A value that about 5k / 4 of the bounds of sources ``cand`` (more than 2k, none NaN)
    reach: the (5k / 4s)-th largest bound of every s-th of them, s = k / 128 (a partition
    of 128 values per k candidates, not of all of them: they can be most of a million)."""
    step = max(1, k // 128)
    sample = bound[cand[::step]]
    rank = min(sample.shape[0], -(-5 * k // (4 * step)))
    return float(np.partition(sample, sample.shape[0] - rank)[sample.shape[0] - rank])


def _kth_largest_bound(bound: np.ndarray, k: int, eligible: np.ndarray | None) -> float:
    """The k-th largest bound of the (eligible) sources; NaN where fewer than k are eligible
    (a NaN bound counts as the largest here: the caller then finds fewer than k sources
    reaching the answer, and gives up)."""
    values = bound if eligible is None else bound[eligible]
    m = values.shape[0]
    if m < k:
        return math.nan
    return float(np.partition(values, m - k)[m - k])


def select_within_hosts(select, host: np.ndarray, caps: np.ndarray, budget: float,
                        cost: np.ndarray | None = None,
                        eligible: np.ndarray | None = None) -> np.ndarray:
    """A policy's choice under ``budget`` with at most ``caps[h]`` crawls of host h's
    sources (``host``: int[N], ids 0..H-1; a cap of inf: no limit).

    ``select(budget, eligible)`` is the policy's own selection, its sources best first (as
    ``select_top`` and every ranking policy give them). What a capped host cannot take goes
    to the next best sources of other hosts: the first choice's sources within their host's
    cap are kept (a capped greedy by rank would take them too: dropping sources only frees
    budget), a host that overflowed keeps its best ``caps[h]`` and is closed, and the policy
    chooses again with the budget left among the sources not yet decided. Each round closes
    a host or ends, so there are at most H + 1 rounds, and only while a cap binds."""
    host = np.asarray(host, dtype=np.int64)
    caps = np.floor(np.asarray(caps, dtype=np.float64) + 1e-9)
    n = host.shape[0]
    allowed = np.ones(n, dtype=bool) if eligible is None else np.array(eligible, dtype=bool)
    left_cap = caps.copy()
    allowed &= left_cap[host] >= 1
    taken: list[np.ndarray] = []
    left = float(budget)
    for _ in range(caps.shape[0] + 1):
        if left <= 1e-12 or not allowed.any():
            break
        chosen = np.asarray(select(left, None if allowed.all() else allowed), dtype=np.int64)
        if not chosen.shape[0]:
            break
        h = host[chosen]
        # rank of each chosen source among its host's chosen ones (best first)
        order = np.argsort(h, kind="stable")
        rank = np.empty(chosen.shape[0], dtype=np.int64)
        starts = np.searchsorted(h[order], h[order])
        rank[order] = np.arange(chosen.shape[0]) - starts
        keep = rank < left_cap[h]
        fixed = chosen[keep]
        taken.append(fixed)
        np.subtract.at(left_cap, host[fixed], 1.0)
        allowed[fixed] = False
        spent = fixed.shape[0] if cost is None else float(
            np.sum(np.broadcast_to(cost, (n,))[fixed]))
        left -= spent
        if keep.all():
            break
        allowed &= left_cap[host] >= 1       # the hosts that overflowed, and full ones
    if not taken:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate(taken)
