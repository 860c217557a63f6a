"""What a learned Whittle policy's crawls (and pushes) teach its rate, value and decay
estimators (``whittle``).

* ephemeral content with item arrays: Lambda_hat (``RateEstimator``, from entry counts and
  publication times, window overflow corrected), xi_hat (``ValueEstimator``, from observed base
  values; where a crawl tells only its captured total, that total over its items' discount at
  mu_hat, weighted by the discount), mu_hat (``DecayEstimator``, from the value captured
  against the items' ages, and their base values where known);
* ephemeral content seen only through counts and captured value: Lambda_hat from ``new_items``
  over the time since the previous crawl, and (mu_hat, A_hat = (Lambda xi)_hat) from the value
  captured over that span (``DecayEstimator.update_span``).
"""

from __future__ import annotations

import numpy as np

from scrapy_whittle.core.estimators._base import segment_rows, segment_sum


class ValueLearning:
    """The learning from captures of ``policy`` (an ``AdaptiveWhittlePolicy``: its ``rates``,
    ``values`` and ``decay``), and the count of entries its crawls missed (a window
    overflowed)."""

    #: mean discount exp(-mu age) below which a crawl's items teach xi nothing
    MIN_DISCOUNT = 1e-6

    def __init__(self, policy) -> None:
        self.policy = policy
        self.missed_total = 0.0
        self.last_missed = 0.0

    def since(self, obs, src, t) -> np.ndarray:
        """Time since each source's previous crawl, in epochs (since it was added, first)."""
        policy = self.policy
        first = np.isnan(policy.rates.last_time[src])
        return np.where(first, (obs.epoch - policy.added_epoch[src]) * 1.0,
                        (t - policy.rates.last_time[src]) / float(policy.problem.period))

    def observe_items(self, obs, sel, src, t, reward, extra=None) -> None:
        """Crawls ``sel`` with item arrays (``extra``: entries pushed since each one's previous
        poll, counted with its own)."""
        off, idx = segment_rows(obs.item_offsets, sel)
        pub = obs.item_published[idx]
        val = obs.item_value[idx]
        _, missed = self.policy.rates.observe_crawls(src, t, off, pub, obs.window_full[sel],
                                                     extra=extra)
        self.last_missed = float(np.sum(missed))
        self.missed_total += self.last_missed
        self.learn_values(src, t, reward, off, pub, val)

    def observe_counts(self, obs, sel, src, t, reward, extra=None) -> None:
        """Crawls ``sel`` of count-only content: the rate and the span's captured value."""
        policy = self.policy
        span = self.since(obs, src, t) * float(policy.problem.period)
        new = obs.new_items[sel] if extra is None else obs.new_items[sel] + extra
        policy.rates.update(src, new, span)
        policy.decay.update_span(src, reward, span)

    def learn_values(self, src, t, reward, off, pub, val, blind_decay: bool = True) -> None:
        """Base values (xi) and decay (mu) from captures: capture j of ``src[j]`` at ``t[j]``
        was worth ``reward[j]``, its entries ``pub[off[j]:off[j+1]]`` (publication times),
        ``val`` (base values, NaN unknown). A poll's and a push's alike: the same entries,
        valued at their capture. ``blind_decay``: captures whose base values are unknown
        teach mu too (``DecayEstimator.update_captures``)."""
        values, decay = self.policy.values, self.policy.decay
        counts = np.diff(off)
        unknown = np.isnan(val)
        if not unknown.all():           # (a feed without engagement: no value per item)
            values.update(np.repeat(src, counts), val)
        ages = np.repeat(t, counts) - pub
        known = segment_sum(unknown.astype(np.float64), off) == 0
        if np.any(known & (counts > 0)):
            k_off, k_idx = segment_rows(off, known)
            decay.update_batch(src[known], reward[known], k_off, ages[k_idx], val[k_idx])
        # crawls whose items carry no base value (a crawl's): mu from the captures at their
        # ages (``DecayEstimator.update_captures``), then xi as the ratio estimator
        # sum R / sum D(mu_hat), D = sum exp(-mu_hat a) over the items: a crawl's value
        # undone at mu_hat and weighted by its discount D. Weighted by the item count instead,
        # an old item found long after publication multiplies any error of mu_hat by
        # exp((mu_hat - mu) a) (mu_hat is the prior's, often many times a slow source's mu,
        # until crawls at different ages teach it); weighted by D, a crawl adds its captured
        # value itself to xi's sum, and what a decayed capture says of xi counts as little as
        # its discount
        blind = ~known & (counts > 0)
        if np.any(blind):
            b_off, b_idx = segment_rows(off, blind)
            n_items = np.diff(b_off).astype(np.float64)
            a = np.nan_to_num(np.where(np.isfinite(ages[b_idx]), ages[b_idx], 0.0))
            if blind_decay:
                decay.update_captures(src[blind], reward[blind], b_off, a)
            mu = decay.mean_at(np.repeat(src[blind], np.diff(b_off)))
            disc = segment_sum(np.exp(-mu * a), b_off)
            # items whose value has all but vanished weigh next to nothing, and R / D could
            # overflow the value's sums: skipped
            clear = disc >= n_items * self.MIN_DISCOUNT
            values.update(src[blind][clear], reward[blind][clear] / disc[clear],
                          weight=disc[clear])
