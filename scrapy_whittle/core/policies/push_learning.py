"""What the pushes (WebSub) teach a learned Whittle policy (``whittle``), and what it keeps of
its sources' hubs (``docs/push.md``).

An entry a hub delivers is captured at no crawl cost, so what a poll of the source is worth is
what the pushes miss. The share p_i of new entries its pushes deliver is learned
(``PushReliability``, from the entries first seen by a poll and those first seen by push, these
once a poll has checked their span), and the index is evaluated at the arrivals the polls still
find, u_i (1 - p_i (1 - q_i)), q_i the posterior probability that the source's pushes stopped
(its silence and the other pushers', evaluated at every selection). The reliability estimator
keeps rows only for the sources that ever pushed (row ``rows.row[i]`` belongs to source i).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scrapy_whittle.core.columns import SparseRows
from scrapy_whittle.core.distinct import distinct
from scrapy_whittle.core.dynamics import geometric_sum
from scrapy_whittle.core.estimators import PushReliability
from scrapy_whittle.core.estimators._base import segment_rows
from scrapy_whittle.core.observation import Observation


class PushLearning:
    """The pushes of ``policy`` (an ``AdaptiveWhittlePolicy``): the reliability of each
    pushing source's hub, the share of arrivals its index counts on the pushes to deliver
    (``used``), the sources whose hub may have failed, and the clock of the observations.

    push: keyword arguments of the ``PushReliability`` (its ``min_censor_age`` defaults to a
        hundredth of an epoch, ``failure_rate`` to one per thousand epochs).
    """

    #: probability of a hub's failure below which its source's waiting value is u G_k (the
    #: pushes' share, never counted as waiting then, is at most this share of it)
    DOUBT = 1e-3
    #: change of a pushing source's counted share below which its u is not computed again
    SHARE_STEP = 1e-3

    def __init__(self, policy, push: dict[str, Any] | None = None) -> None:
        self.policy = policy
        period = float(policy.problem.period)
        self.reliability = PushReliability(0, **{"min_censor_age": 0.01 * period,
                                                 "failure_rate": 1e-3 / period,
                                                 **(push or {})})
        self.rows = SparseRows(self._allocate)
        self.rows.grow(policy.n)
        self._pushers: np.ndarray | None = None     # source of each push row (derived)
        self.used: np.ndarray | None = None         # reliability in u (derived)
        # sources whose hub may have failed: (ids, p, epochs since their last useful push,
        # probability of the failure) (derived)
        self.failed: tuple[np.ndarray, ...] | None = None
        # sources whose hub more likely failed than not and whose polls never taught their
        # decay (derived)
        self.relearn: np.ndarray | None = None
        self.clock: tuple[float, float, float] | None = None  # (epoch, poll time, push time)

    def _allocate(self, ids: np.ndarray) -> np.ndarray:
        start = self.reliability.n
        self.reliability.grow(ids.shape[0])
        self._pushers = None
        return np.arange(start, start + ids.shape[0])

    def forget(self) -> None:
        """Drop what is derived (a state imported); the reliability at the last time known."""
        self._pushers = None
        self.used = None
        self.failed = self.relearn = None
        if self.reliability.n:
            self.refresh(None)

    # -- the clock --------------------------------------------------------------------------
    def tick(self, epoch, poll_time, push_time) -> None:
        """Keep the latest epoch and times seen: the clock of ``now``."""
        e, tp, tq = self.clock or (np.nan, np.nan, np.nan)
        if epoch is not None and not epoch < e:
            e, tp = float(epoch), poll_time
        if push_time is not None:
            tq = push_time if np.isnan(tq) else max(tq, push_time)
        self.clock = (e, tp, tq)

    def now(self, epoch: int | None) -> float:
        """The time at the start of ``epoch`` as far as the observations tell (the latest
        poll's time moved on by whole epochs, or the latest push if later; None: the latest
        time known)."""
        e, tp, tq = self.clock or (np.nan, np.nan, np.nan)
        if epoch is None:
            epoch = e
        now = tp + (epoch - e) * float(self.policy.problem.period) if np.isfinite(e) else np.nan
        return float(np.fmax(now, tq))

    # -- learning ---------------------------------------------------------------------------
    def observe(self, obs: Observation) -> bool:
        """Deliveries of a hub: row j of ``obs`` is one push to ``obs.sources[j]`` at
        ``obs.time[j]`` that brought ``obs.new_items[j]`` entries not seen before (0: a
        duplicate or spurious push), worth ``obs.reward[j]`` at delivery; its item arrays, when
        given, hold those new entries (publication time, base value). A push costs no crawl:
        the policy learns the source's push reliability, and the new entries' base values,
        but the source's last crawl is unchanged. Returns True (pushes are used)."""
        policy = self.policy
        keep = obs.ok & (obs.sources >= 0) & (obs.sources < policy.n) & np.isfinite(obs.time)
        if not keep.any():
            return True
        src = obs.sources[keep]
        rows = self.rows.rows(src, create=True)
        off = late = None
        if obs.item_offsets is not None:
            off, idx = segment_rows(obs.item_offsets, keep)
            pub = obs.item_published[idx]
            late = np.repeat(obs.time[keep], np.diff(off)) - pub
            # pushed entries valued at their delivery teach xi, and mu where their base
            # values are known (the decay at their small age); where only their values at
            # capture are, not mu: a push's value of one entry against a poll's mean value of
            # several is biased by the spread of the base values (E log xi < log E xi)
            useful = np.diff(off) > 0
            if useful.any():
                u_off, u_idx = segment_rows(off, useful)
                policy.learning.learn_values(src[useful], obs.time[keep][useful],
                                             obs.reward[keep][useful], u_off, pub[u_idx],
                                             obs.item_value[idx][u_idx], blind_decay=False)
        self.reliability.update_pushes(rows, obs.time[keep], obs.new_items[keep], off, late)
        self.tick(None, None, float(np.max(obs.time[keep])))
        policy._estimates_changed(distinct(src))
        policy._rescale_values()
        return True

    def poll_evidence(self, obs, sel, src, t) -> np.ndarray | None:
        """Polls of sources that push are evidence of what their hub missed; returns the
        entries pushed since each polled source's previous poll (None: no source polled
        pushes), which the rate update counts with the poll's own."""
        pushing = self.rows.has(src)
        if not pushing.any():
            return None
        rows = self.rows.rows(src[pushing])
        at = np.flatnonzero(sel)[pushing]
        if obs.item_offsets is not None:
            off, idx = segment_rows(obs.item_offsets, at)
            published = obs.item_published[idx]
        else:                                   # counts only: every new entry is a miss
            off = np.concatenate([[0], np.cumsum(obs.new_items[at])])
            published = np.full(int(off[-1]), np.nan)
        _, pushed = self.reliability.update_polls(
            rows, t[pushing], off, published,
            since=self.policy.rates.last_time[src[pushing]], listed_from=obs.listed_from[at])
        extra = np.zeros(src.shape[0])
        extra[pushing] = pushed
        return extra

    # -- what the index counts on -----------------------------------------------------------
    def sources(self) -> np.ndarray:
        """The source of each push row."""
        if self._pushers is None or self._pushers.shape[0] != self.reliability.n:
            has = np.flatnonzero(self.rows.has())
            out = np.empty(self.reliability.n, dtype=np.int64)
            out[self.rows.rows(has)] = has
            self._pushers = out
        return self._pushers

    def refresh(self, epoch: int | None) -> None:
        """The reliability the index counts on for every source that ever pushed, at
        ``epoch`` (a hub falls silent with time alone); the sources whose reliability
        changed get their u computed again."""
        if not self.reliability.n:
            return
        policy = self.policy
        if self.used is None or self.used.shape[0] != policy.n:
            old = self.used
            self.used = np.zeros(policy.n)
            if old is not None:
                self.used[:old.shape[0]] = old
        ids = self.sources()
        rows = np.arange(ids.shape[0])
        now = self.now(epoch)
        doubt = self.reliability.failure_at(rows, now, policy.rates.mean_at(ids))
        share = np.nan_to_num(self.reliability.share_at(rows), nan=0.0)
        rel = share * (1.0 - doubt)
        self.failed = self.relearn = None
        doubted = doubt > self.DOUBT
        if doubted.any():
            # a silent hub delivered until its last useful push
            period = float(policy.problem.period)
            since = (now - self.reliability.last_push[rows[doubted]]) / period
            self.failed = (ids[doubted], share[doubted], since, doubt[doubted])
            blank = (doubt > 0.5) & ~policy.decay.learned_at(ids)
            if blank.any():
                self.relearn = ids[blank]
        # u is computed again where the share counted on moved by more than a rounding: the
        # probability of a failure moves a little at every selection for every silent source
        moved = np.abs(rel - self.used[ids]) > self.SHARE_STEP
        moved |= (rel == 0.0) != (self.used[ids] == 0.0)
        if moved.any():
            self.used[ids[moved]] = rel[moved]
            policy._estimates_changed(ids[moved])

    def fallen_state(self, epoch: int, x: np.ndarray, u: np.ndarray) -> None:
        """x of the explored sources whose hub failed: polls found the share 1 - p of their
        arrivals since their last crawl, the whole of them since the hub's last useful push
        only, x = u ((1 - p) G_k + p G_s), s = min(k, epochs since that push). (u
        itself, their future arrivals, is the full one.) Counting the whole of them
        since the last crawl would make one long gap between pushes of a silent hub look like
        hours of value waiting."""
        policy = self.policy
        ids, share, since, doubt = self.failed
        # u counts the share of the arrivals the pushes are expected to miss, p (1 - q) of
        # them less; the full arrivals are u / (1 - that)
        full = u / np.maximum(1.0 - self.used, 1e-12)
        if self.relearn is not None:
            # explored again as a source never crawled is, for what the failure made unknown:
            # the arrivals since the hub's last useful push, undecayed (its polls never taught
            # its decay, and its pushes cannot: a push is seen at an age near 0), q p s; those
            # the pushes missed before are what its polls always found, decayed at the
            # estimate, (1 - p) G_k. Undecayed since the last poll, every such source would
            # outrank every explored one at once when a hub serving many falls
            back = self.relearn
            at = np.flatnonzero(np.isin(ids, back))
            k = np.maximum(epoch - policy.last_epoch[ids[at]], 0.0)
            s = np.clip(np.nan_to_num(since[at], nan=np.inf), 0.0, k)
            polled = np.isfinite(k)
            _, log_alpha, one_minus = policy._alphas_at(ids[at], with_alpha=False)
            with np.errstate(divide="ignore", invalid="ignore"):
                g_k = geometric_sum(k, log_alpha, one_minus)
            waiting = (1.0 - share[at]) * g_k + doubt[at] * share[at] * s
            x[ids[at][polled]] = full[ids[at][polled]] * waiting[polled]
            keep = ~np.isin(ids, back)
            ids, share, since, doubt = ids[keep], share[keep], since[keep], doubt[keep]
        k = epoch - policy.last_epoch[ids]
        ok = np.isfinite(k) & np.isfinite(x[ids])
        if not ok.any():
            return
        ids, share, doubt, k = ids[ok], share[ok], doubt[ok], np.maximum(k[ok], 0.0)
        s = np.clip(np.nan_to_num(since[ok], nan=np.inf), 0.0, k)
        _, log_alpha, one_minus = policy._alphas_at(ids, with_alpha=False)
        with np.errstate(divide="ignore", invalid="ignore"):
            g_k = geometric_sum(k, log_alpha, one_minus)
            g_s = geometric_sum(s, log_alpha, one_minus)
        # working (1 - q): the polls' share alone, no push having come since s; failed (q):
        # the pushes' share too since the last useful push
        x[ids] = full[ids] * ((1.0 - share) * g_k + doubt * share * g_s)

    # -- health and outputs -----------------------------------------------------------------
    def invalid(self, ids: np.ndarray) -> np.ndarray:
        """bool over ``ids``: the source's push row holds unusable numbers."""
        bad = np.zeros(ids.shape[0], dtype=bool)
        pushing = self.rows.has(ids)
        if pushing.any():
            bad[pushing] = self.reliability.invalid(self.rows.rows(ids[pushing]))
        return bad

    def reset(self, ids: np.ndarray) -> None:
        """The push rows of sources ``ids`` back to their priors."""
        pushing = self.rows.has(ids)
        if pushing.any():
            self.reliability.reset(self.rows.rows(ids[pushing]))

    def shares(self) -> np.ndarray:
        """The share of each source's new entries its pushes deliver (0: no push)."""
        out = np.zeros(self.policy.n)
        if self.reliability.n:
            ids = self.sources()
            out[ids] = self.reliability.share_at(np.arange(ids.shape[0]))
        return out
