"""How far each source's pushes (WebSub) can be trusted: the share of its new entries a hub
delivers, how late, and whether the hub went silent.

A push is a noisy change signal (``docs/push.md``): deliveries are late, lost, duplicated or
spurious, and a hub may stop altogether. The evidence, per source:

* an entry first seen by push (``update_pushes``), with its lateness (delivery time minus
  publication time);
* an entry first seen by a poll (``update_polls``) that no push announced. An entry younger
  than the pushes' usual lateness (``censor_age``) when the poll saw it may still have been on
  its way: it is evidence of nothing and is left out;
* a push that brought no new entry (all its entries known: a duplicate, or a spurious ping)
  is evidence of nothing: it neither shows the hub working (its silence, below, counts from
  the last push that brought something) nor lying (a hub that pings much and delivers its
  entries too is a working hub).

Only a poll sees what the hub lost, so a push is evidence only once a poll has checked its
span: the pushes since the last poll (``pending``) wait, and the next poll counts them with
the misses it found, in the share of the span its feed still listed (``listed_from``: a feed
showing its newest K entries cannot show the misses older than those). Counting the pushes at
once would compare every push with the misses of the checked spans only, and push p to 1 for
a source seldom polled (every push counted, none of its misses seen).

The share of new entries delivered by push is a Beta-Binomial posterior mean with an
empirical-Bayes prior: p = (pushed + m p0) / (pushed + polled + m), m = ``prior_entries``
pseudo-entries at the prior share p0. For a source whose hub has delivered something new, p0 is
the pooled share of every source's checked evidence (sum pushed / (sum pushed + sum polled +
m)): hubs lose alike more often than not, and a source polled seldom starts from what the
others showed instead of from nothing; for one whose hub never did (empty pings only), and
while no poll has checked any push, p0 = 0: a source is not trusted to push until pushes were
seen to deliver. Every count is discounted by exp(-k / ``memory``) as k new entries are
counted, so the estimate follows a hub whose quality changes, over about ``memory`` entries.

The hub of a source is judged failed where it is silent: the posterior probability that its
pushes have stopped (``failure_at``) is over a half. The hub of a source, and the path every
push takes (a hub shared by many feeds, the crawler's own callback), each fail at the prior
rate ``failure_rate`` per unit of time; a working one delivers the source's new entries at the
rate Lambda p (its publishing rate times its share), so a silence of t since its last push that
brought a new entry has the probability exp(-Lambda p t) while it works, and the posterior odds
of a failure within that silence are h / (h + Lambda p) (exp((h + Lambda p) t) - 1). The shared
path is judged by the silence since the latest useful push of any source, at the others' summed
rate: where they share a hub, its fall is seen at the pace of all of them together, and a slow
source need not wait for its own silence to become unlikely; where their hubs are many, the
others keep speaking and say nothing of this one. q = 1 - 1 / ((1 + own odds) (1 + shared
odds)). A hub that lies (keeps pinging, with nothing new, while its source publishes) is silent
by this measure; one that delivers some entries and loses others is what p measures, from the
polls.

``reliability_at`` is the share the policy may count on: p (1 - q), q the probability of a
failure; the expected share under the posterior (the index is linear in the arrivals, so this
prices a poll at its expected worth). A push that brings something new ends the silence at once
(p was kept).

``pending``: the entries pushed since the source's last poll, which ``update_polls`` returns for
that poll's publishing-rate update to add to the entries it found itself (both are the
source's arrivals over the span the poll covers).
"""

from __future__ import annotations

import numpy as np

from scrapy_whittle.core.estimators._base import (
    VectorEstimator,
    as_column,
    as_ragged,
    as_sources,
    plausible,
)


class PushReliability(VectorEstimator):
    """Per-source push reliability (see the module docstring).

    prior_entries: pseudo-entries behind the prior share (> 0).
    memory: entries over which old evidence fades (exp(-k / memory) as k are counted).
    failure_rate: prior rate at which a hub (or the path every push takes) fails, per unit of
        time (> 0): the posterior odds of a failure start from it.
    min_censor_age: entries seen by a poll younger than this are never evidence (time unit of
        the times given); the censor age is at least this, else the pushes' mean lateness
        plus three standard deviations.
    """

    per_source = {"pushed": 0.0, "polled": 0.0, "late_w": 0.0, "late_sum": 0.0, "late_sq": 0.0,
                  "last_push": np.nan, "pending": 0.0, "first_push": np.nan}

    def __init__(self, n: int = 0, *, prior_entries: float = 1.0, memory: float = 200.0,
                 failure_rate: float = 1e-3, min_censor_age: float = 0.0) -> None:
        for name, value in (("prior_entries", prior_entries), ("memory", memory),
                            ("failure_rate", failure_rate)):
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"{name} ({value!r}) must be finite and > 0")
        if not (np.isfinite(min_censor_age) and min_censor_age >= 0):
            raise ValueError(f"min_censor_age ({min_censor_age!r}) must be finite and >= 0")
        self.prior_entries = float(prior_entries)
        self.memory = float(memory)
        self.failure_rate = float(failure_rate)
        self.min_censor_age = float(min_censor_age)
        super().__init__(n)

    def _invalid_extra(self, ids):
        counts = (self.pushed[ids], self.polled[ids], self.late_w[ids], self.pending[ids])
        bad = np.zeros(ids.shape[0], dtype=bool)
        for c in counts:
            bad |= ~(np.isfinite(c) & (c >= 0))
        return bad | np.isinf(self.last_push[ids])

    def _fade(self, ids: np.ndarray, entries: np.ndarray, cols: tuple[np.ndarray, ...]
              ) -> None:
        """Discount the evidence ``cols`` of ``ids`` (distinct) before ``entries`` more are
        counted."""
        f = np.exp(-entries / self.memory)
        for col in cols:
            col[ids] *= f

    # -- updates ----------------------------------------------------------------------------
    def update_pushes(self, sources, times, new_entries, offsets=None, lateness=None
                      ) -> np.ndarray:
        """Deliveries: push j of ``sources[j]`` at ``times[j]`` brought ``new_entries[j]``
        entries not seen before (0: a duplicate or spurious push); ``lateness[offsets[j]:
        offsets[j+1]]`` their delivery time minus publication time (NaN: unknown; None: no
        lateness known at all). Repeated sources are accumulated. Returns the accepted mask
        (time finite, count finite >= 0)."""
        ids = as_sources(sources, self.n)
        k = ids.shape[0]
        t = as_column("times", times, k)
        new = as_column("new_entries", new_entries, k)
        ok = plausible(t) & plausible(new) & (new >= 0)
        if not ok.any():
            return ok
        used = ids[ok]
        uniq, inv = np.unique(used, return_inverse=True)
        # the hub's lateness is discounted as pushes come; the share as polls check them
        # (update_polls)
        self._fade(uniq, np.bincount(inv, weights=new[ok], minlength=uniq.shape[0]),
                   (self.late_w, self.late_sum, self.late_sq))
        np.add.at(self.pending, used, new[ok])     # evidence of p once a poll checks them
        first = np.full(uniq.shape[0], np.inf)
        np.minimum.at(first, inv, t[ok])
        self.first_push[uniq] = np.fmin(self.first_push[uniq], first)
        useful = new[ok] > 0                     # an empty push says nothing of the hub's health
        if useful.any():
            last = self.last_push[uniq]
            newest = np.full(uniq.shape[0], -np.inf)
            np.maximum.at(newest, inv[useful], t[ok][useful])
            seen = np.isfinite(newest)
            self.last_push[uniq[seen]] = np.where(np.isnan(last[seen]), newest[seen],
                                                  np.maximum(last[seen], newest[seen]))
        if offsets is not None and lateness is not None:
            off, late = as_ragged("lateness", offsets, lateness, k)
            owner = np.repeat(np.arange(k), np.diff(off))
            good = ok[owner] & plausible(late) & (late >= 0)
            src = ids[owner[good]]
            np.add.at(self.late_w, src, 1.0)
            np.add.at(self.late_sum, src, late[good])
            np.add.at(self.late_sq, src, late[good] ** 2)
        return ok

    def update_polls(self, sources, times, offsets, published, since=None,
                     listed_from=None) -> tuple[np.ndarray, np.ndarray]:
        """Polls: poll j of ``sources[j]`` (distinct) at ``times[j]`` found
        ``published[offsets[j]:offsets[j+1]]`` (publication times of the entries it saw
        first). Those older than the source's ``censor_age`` are entries the hub did not
        deliver; so are those of unknown age (NaN), whose chance of being on their way is not
        worth a guess; those published before the source's first push are no evidence (its
        hub may not have been delivering yet: the entries a first poll after a subscription
        finds). The entries pushed since the source's previous poll (at ``since[j]``) are
        counted with them, in the share of that span the poll checked: from the oldest entry
        its feed listed (``listed_from[j]``, new or known) on; all of them where either time
        is unknown (NaN, or None for all). Returns (the accepted mask (time finite), the
        entries pushed since each source's previous poll: for the rate update of this poll,
        set back to 0 where accepted)."""
        ids = as_sources(sources, self.n)
        k = ids.shape[0]
        t = as_column("times", times, k)
        off, pub = as_ragged("published", offsets, published, k)
        ok = plausible(t)
        if np.unique(ids[ok]).shape[0] != int(ok.sum()):
            raise ValueError("update_polls takes each source at most once per call")
        owner = np.repeat(np.arange(k), np.diff(off))
        age = t[owner] - pub
        start = self.first_push[ids]
        counted = ok[owner] & (np.isnan(age) | (plausible(age)
                                                & (age > self.censor_age(ids)[owner])
                                                & ~(pub < start[owner])))
        missed = np.bincount(owner[counted], minlength=k).astype(np.float64)
        pending = np.where(ok, self.pending[ids], 0.0)
        since = np.full(k, np.nan) if since is None else as_column("since", since, k)
        checked = pending * self._checked_share(t, np.fmax(since, start), listed_from, k)
        used = ids[ok]
        self._fade(used, missed[ok] + checked[ok], (self.pushed, self.polled))
        self.polled[used] += missed[ok]
        self.pushed[used] += checked[ok]
        self.pending[used] = 0.0
        return ok, pending

    @staticmethod
    def _checked_share(t, start, listed_from, k: int) -> np.ndarray:
        """The share of the span (start, t] from the oldest entry listed on (pushes and
        publications being uniform over a span of a Poisson stream); 1 where unknown."""
        if listed_from is None:
            return np.ones(k)
        oldest = as_column("listed_from", listed_from, k)
        with np.errstate(invalid="ignore", divide="ignore"):
            share = (t - np.maximum(start, oldest)) / (t - start)
        known = plausible(start) & plausible(oldest) & (t > start)
        return np.where(known, np.clip(np.nan_to_num(share, nan=1.0), 0.0, 1.0), 1.0)

    # -- estimates --------------------------------------------------------------------------
    def pooled_share(self) -> float:
        """p0: the share of new entries first seen by push over every source's checked
        evidence (0 with none)."""
        pushed = float(self.pushed.sum())
        return pushed / (pushed + float(self.polled.sum()) + self.prior_entries)

    def share_at(self, ids) -> np.ndarray:
        """p: the (discounted) share of new entries first seen by push, shrunk to the prior
        share: the pooled one where the hub has delivered something new, else 0."""
        pushed = self.pushed[ids]
        m = self.prior_entries
        prior = np.where(np.isfinite(self.last_push[ids]), m * self.pooled_share(), 0.0)
        return (pushed + prior) / (pushed + self.polled[ids] + m)

    def mean(self) -> np.ndarray:
        return self.share_at(slice(None))

    get = mean

    def lateness_at(self, ids) -> tuple[np.ndarray, np.ndarray]:
        """(mean, standard deviation) of the pushed entries' lateness (NaN: none known)."""
        w = self.late_w[ids]
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(w > 0, self.late_sum[ids] / w, np.nan)
            var = np.where(w > 0, self.late_sq[ids] / w - mean ** 2, np.nan)
        return mean, np.sqrt(np.maximum(var, 0.0))

    def censor_age(self, ids) -> np.ndarray:
        """Age below which an entry a poll saw first may still be on its way by push."""
        mean, std = self.lateness_at(ids)
        return np.maximum(np.nan_to_num(mean + 3.0 * std, nan=0.0), self.min_censor_age)

    def failure_at(self, ids, now: float, rate) -> np.ndarray:
        """q: the posterior probability that the pushes of each source ``ids`` have stopped,
        from its silence since its last useful push at ``rate`` (the publishing rate of every
        row, entries per unit of time) times its share, and from the silence of all the others
        together (a shared hub, the crawler's callback): q = 1 - (1 - q_own) (1 - q_shared)."""
        last = self.last_push
        speed = np.nan_to_num(np.asarray(rate, dtype=np.float64) * self.share_at(slice(None)),
                              nan=0.0)
        speed = np.where(np.isfinite(last), np.maximum(speed, 0.0), 0.0)
        own = self._failure_odds(now - last, speed)
        # the shared path: spoken through until the latest useful push of any source (this
        # one's included); its silence since then is weighed at the others' summed speed
        # (this source's own is counted in q_own)
        spoke = np.isfinite(last)
        latest = float(last[spoke].max()) if spoke.any() else np.nan
        others = np.maximum(float(speed.sum()) - speed, 0.0)
        shared = self._failure_odds(np.full(last.shape[0], now - latest), others)
        return (1.0 - 1.0 / (1.0 + own) / (1.0 + shared))[ids]

    def _failure_odds(self, silence, speed) -> np.ndarray:
        """Posterior odds that a path delivering at ``speed`` failed within ``silence`` of no
        delivery, its failure time exponential at ``failure_rate``: the prior odds of a
        failure in a span of that length, weighed by the silence's likelihood either way."""
        h = self.failure_rate
        both = h + speed
        with np.errstate(over="ignore", invalid="ignore"):
            odds = h / both * np.expm1(both * np.maximum(silence, 0.0))
        return np.where(np.isfinite(silence) & (speed > 0), np.nan_to_num(odds, nan=0.0,
                                                                          posinf=np.inf), 0.0)

    def silent_at(self, ids, now: float, rate) -> np.ndarray:
        """The pushes of each source have more likely stopped than not (``rate``: of every
        row)."""
        return self.failure_at(ids, now, rate) > 0.5

    def reliability_at(self, ids, now: float, rate) -> np.ndarray:
        """The share of new entries the policy may count on push to deliver: p times the
        probability the pushes still come (``rate``: of every row)."""
        return self.share_at(ids) * (1.0 - self.failure_at(ids, now, rate))
