"""A continuous-time web of news feeds: the items that ``sim.serve`` publishes.

Same model as the pure simulator (``sim.web.ephemeral``, stochastic case of *Whittle Index Policy
for Crawling Ephemeral Content*, IEEE TCNS 2018): source i publishes items as a Poisson
process of rate Lambda_i; item j has a base utility xi_j ~ Exponential(mean xi_bar_i); its
value at time t >= p_j (publication) is xi_j exp(-mu_i (t - p_j)). A crawl at time t captures
the current value of every item published since the source's previous crawl that is still in
the feed's window (the newest ``window`` items); items pushed out of the window unseen are
missed. Time is in the scenario's unit (hours for news-mix). With a ``profile``
(``sim.web.profiles.DiurnalProfile``, the ``news-diurnal`` scenario) the intensity is
Lambda_i p_i(t): inter-arrival times are drawn in the operational time Lambda_i P_i(t) and
mapped back through P_i^{-1}, exactly as ``sim.web.diurnal.DiurnalWeb`` does.

Items are drawn lazily per source, each source from its own generator spawned from one
``SeedSequence``, so the item stream of a source does not depend on when or how often other
sources are fetched: the HTTP server and :func:`simulate` (crawls at exact epoch instants)
see exactly the same items for the same seed. The ground-truth ledger (``captured``,
``missed``) assumes a single crawler.

``start="warm"``: the web has been publishing since -infinity, so at time 0 each feed's window
already lists its newest ``window`` entries, drawn backwards from time 0 (exponential gaps,
in operational time with a profile: the stationary law of the Poisson process), with base
utilities, seq numbers 0..window-1 and negative publication times. The stock comes from a
generator of its own, so the items published after time 0 are the same as with
``start="empty"`` for the same seed (shifted by ``window`` in seq). ``missed`` counts only
items published at or after time 0 (what a crawler started at 0 could have caught).

:meth:`FeedWeb.user_measures` gives a crawl's measures in its user's terms, the same for any
crawler of the web (``sim.serve``'s through Scrapy, :func:`simulate`'s): the discovery delay
(publication to capture) of the items captured that were published at or after time 0, and
those pushed out of their window unseen.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.problem import SourceParams
from sim.web.credit import BudgetCredit
from sim.web.ephemeral import check_start


@dataclass(frozen=True)
class Item:
    source: int
    seq: int           # 0, 1, 2, ... per source
    published: float   # scenario time units
    base: float        # xi_j, value at publication


class FeedWeb:
    """Items of N sources in continuous time, generated on demand up to the time asked."""

    def __init__(self, params: SourceParams, *, seed: int = 0, window: int = 20,
                 profile=None, start: str = "empty") -> None:
        if window < 1:
            raise ValueError(f"window ({window!r}) must be >= 1")
        if profile is not None and profile.n != params.n:
            raise ValueError(f"profile describes {profile.n} sources, params {params.n}")
        self.params = params
        self.profile = profile
        self.seed = seed
        self.window = window
        self.start = check_start(start)
        n = params.n
        self._seqs = np.random.SeedSequence([seed, 2018, 7]).spawn(n)
        self._rngs: list[np.random.Generator | None] = [None] * n
        self._next = np.full(n, np.nan)            # next arrival time (NaN: not drawn yet)
        self._next_op = np.zeros(n)                # the same in operational time (profile)
        self._count = np.zeros(n, dtype=np.int64)  # items published so far
        self._items: list[deque[Item]] = [deque(maxlen=window) for _ in range(n)]
        self._upto = np.zeros(n)                   # items generated up to this time
        self.last_fetch = np.full(n, -np.inf)      # time of the previous fetch (ledger)
        self.captured = np.zeros(n)                # utility captured per source
        self.captured_items = np.zeros(n, dtype=np.int64)
        self.missed_items = np.zeros(n, dtype=np.int64)
        # the part of missed_items a crawler could know of: lost after its first fetch
        self.missed_after_first_fetch = np.zeros(n, dtype=np.int64)
        self.fetches = np.zeros(n, dtype=np.int64)
        # publication to capture of the items captured that were published at or after 0
        self.delays: list[float] = []

    @property
    def n(self) -> int:
        return self.params.n

    def _rng(self, i: int) -> np.random.Generator:
        rng = self._rngs[i]
        if rng is None:
            rng = self._rngs[i] = np.random.default_rng(self._seqs[i])
        return rng

    def advance(self, i: int, t: float) -> None:
        """Generate source i's items published up to time t."""
        stock_due = self.start == "warm" and np.isnan(self._next[i])
        if t <= self._upto[i] and not stock_due:
            return
        rate = float(self.params.rate[i])
        if rate <= 0:
            self._upto[i] = max(self._upto[i], t)
            return
        rng = self._rng(i)
        xi_bar = float(self.params.mean_utility[i])
        items = self._items[i]
        if np.isnan(self._next[i]):
            if self.start == "warm":
                self._stock(i, rate, xi_bar)
            self._next[i] = self._after(i, 0.0, rng.exponential(1.0 / rate))
        while self._next[i] <= t:
            if (len(items) == self.window and items[0].published > self.last_fetch[i]
                    and items[0].published >= 0.0):
                self.missed_items[i] += 1          # pushed out of the window unseen
                if self.fetches[i] > 0:
                    self.missed_after_first_fetch[i] += 1
            items.append(Item(i, int(self._count[i]), float(self._next[i]),
                              float(rng.exponential(xi_bar))))
            self._count[i] += 1
            self._next[i] = self._after(i, float(self._next[i]), rng.exponential(1.0 / rate))
        self._upto[i] = max(self._upto[i], t)

    def _stock(self, i: int, rate: float, xi_bar: float) -> None:
        """Source i's window at time 0 of a warm start (see the module docstring)."""
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, 2018, 8, i]))
        back = np.cumsum(rng.exponential(1.0 / rate, self.window))[::-1]   # oldest first
        times = -back if self.profile is None else \
            self.profile.inverse(-back, np.full(self.window, i))
        base = rng.exponential(xi_bar, self.window)
        for j in range(self.window):
            self._items[i].append(Item(i, j, float(times[j]), float(base[j])))
        self._count[i] = self.window

    def _after(self, i: int, t: float, gap: float) -> float:
        """The arrival ``gap`` after time t: in real time, or in operational time P_i."""
        if self.profile is None:
            return t + gap
        self._next_op[i] += gap
        return float(self.profile.inverse(np.array([self._next_op[i]]), np.array([i]))[0])

    def feed(self, i: int, t: float) -> list[Item]:
        """The window of source i at time t, newest first."""
        self.advance(i, t)
        return list(reversed(self._items[i]))

    def next_publication(self, i: int, t: float) -> float:
        """When source i publishes its next item after time t (inf: never)."""
        self.advance(i, t)
        nxt = self._next[i]
        return math.inf if np.isnan(nxt) else float(nxt)

    def latest_seq(self, i: int, t: float) -> int:
        self.advance(i, t)
        return int(self._count[i]) - 1

    def value(self, item: Item, t: float) -> float:
        """Current value of ``item`` at time t."""
        return item.base * float(np.exp(-self.params.decay[item.source] * (t - item.published)))

    def fetch(self, i: int, t: float) -> tuple[list[Item], float]:
        """A crawl of source i at time t: (new items in the window, value captured).

        Updates the ground-truth ledger; ``feed`` alone does not."""
        window = self.feed(i, t)
        new = [it for it in window if it.published > self.last_fetch[i]]
        value = sum(self.value(it, t) for it in new)
        self.last_fetch[i] = t
        self.captured[i] += value
        self.captured_items[i] += len(new)
        self.fetches[i] += 1
        self.delays.extend(t - it.published for it in new if it.published >= 0.0)
        return new, value

    def totals(self) -> dict[str, float]:
        return {"captured": float(self.captured.sum()),
                "captured_items": int(self.captured_items.sum()),
                "missed_items": int(self.missed_items.sum()),
                "missed_after_first_fetch": int(self.missed_after_first_fetch.sum()),
                "fetches": int(self.fetches.sum())}

    def user_measures(self, until: float) -> dict[str, float]:
        """Up to time ``until`` (at or after the last fetch): the median and mean discovery
        delay (scenario units) of the items captured that were published at or after time 0
        (NaN if none), how many those are, and the items published at or after 0 that were
        pushed out of their window unseen by then. Every source's items are generated up to
        ``until`` first: a source fetched seldom has lost items it has not been asked
        about yet."""
        for i in range(self.n):
            self.advance(i, until)
        delays = np.asarray(self.delays, dtype=np.float64)
        return {"median_delay": float(np.median(delays)) if delays.size else float("nan"),
                "mean_delay": float(delays.mean()) if delays.size else float("nan"),
                "delayed_items": int(delays.size),
                "missed_items": int(self.missed_items.sum())}


def simulate(web: FeedWeb, policy, budget: float, epochs: int, *, start: float = 0.0,
             period: float | None = None, steps: int = 1) -> float:
    """Run ``policy`` on ``web`` with crawls at the exact instants start + k * period, the
    discrete-epoch reading of the model; returns the utility captured. ``period`` defaults to
    the scenario's T. This is the reference the Scrapy fidelity test compares against.
    ``steps`` > 1: the policy decides ``steps`` times an epoch, at fractional epochs, the
    epoch's budget spent through a credit (a crawl with ``WHITTLE_STEP`` = T / steps)."""
    period = web.params.period if period is None else period
    credit = BudgetCredit(budget / steps) if steps > 1 else None
    total = 0.0
    for k in range(epochs * steps):
        t = start + k * period / steps
        at = k if steps == 1 else k / steps
        allowance = budget if credit is None else credit.allowance()
        chosen = np.asarray(policy.select(at, allowance), dtype=np.int64)
        if credit is not None:
            credit.spend(np.ones(web.n), chosen)
        news, rewards, offsets, pubs = [], [], [0], []
        for i in chosen:
            new, value = web.fetch(int(i), t)
            news.append(len(new))
            rewards.append(value)
            pubs.extend(it.published for it in new)
            offsets.append(len(pubs))
        total += float(sum(rewards))
        policy.observe(Observation(
            epoch=at, sources=chosen, time=np.full(len(chosen), t), new_items=news,
            reward=rewards, window_full=[n == web.window for n in news],
            item_offsets=offsets, item_published=pubs))
    return total
