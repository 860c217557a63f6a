"""Plausible ranges for everything a crawl teaches the policy: what one hostile feed can move.

A feed is input from strangers. Before anything it shows reaches an estimator or a stat, the
re-crawl service passes it through these functions (one place, so that the Scrapy middleware,
a cluster's planner and the simulator agree):

* **engagement** (``slash:comments``, ``thr:total``): finite, in [0, ``MAX_ENGAGEMENT``]
  (10^9; NaN or negative: none); the **value of one entry** (engagement /
  ``WHITTLE_ENGAGEMENT_SCALE``, or ``WHITTLE_ITEM_VALUE`` x the source's weight) in
  [0, ``MAX_ENTRY_VALUE``] (10^9). A clipped value is counted under ``whittle/clipped/value``.
* **publication times** that teach the policy: unknown, non-finite or in the future -> the
  time the entry was first seen (now); never older than ``MAX_AGE`` (20 years); and never
  before the previous successful fetch of the source, less ``SINCE_SLACK`` (2 s: dates have
  whole seconds) (cross-checked against first-seen times: an entry that fetch did not show
  appeared after it was sent, whatever date it carries); counted under
  ``whittle/clipped/published``. At a source's first fetch, where nothing bounds them, a
  date that lies far before all the others (``outlier_times``) is taken as unknown: one
  impossible date cannot stretch the span the entries are counted over by orders of
  magnitude.
* **new entries per fetch** that teach the policy (``burst_cap``): at most ``BURST_MIN``
  (100), or ``BURST_FACTOR`` (4) times the most a previous fetch of the source taught. A feed
  that suddenly shows more unseen entries than that (regenerated ids, a replayed archive)
  hands them all to the spider, but teaches the policy only the newest of those dated after
  its previous fetch (entries that claim to be older were not there then: a replay, not
  news), with their share of the value; counted under ``whittle/bursts`` and logged once per
  source. At a first fetch the cap keeps the newest 100: with honest dates the rate estimate
  is the same (the newest K entries of a Poisson stream are an unbiased sample of its
  rate).
* **feedback** (``report_value``): the value clipped as above, the age in [0, ``MAX_AGE``].

The estimators refuse non-finite input themselves (``scrapy_whittle.core.estimators._base``) and the
policy repairs a source whose state went bad (``Policy.repair``); these ranges keep the
estimates plausible, not just finite.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

MAX_ENGAGEMENT = 1e9          # comments / shares of one entry
MAX_ENTRY_VALUE = 1e9         # value of one entry after scaling
MAX_AGE = 20 * 365.25 * 86400.0   # seconds; as scrapy_whittle.feeds.parse.MAX_AGE
BURST_MIN = 100               # new entries one fetch may teach, at least
BURST_FACTOR = 4              # ... or this times the most an earlier fetch taught
OUTLIER_GAP = 20.0            # an oldest date this many mean gaps before the next is an outlier
OUTLIER_MIN_DATES = 3         # dates needed to call one an outlier
SINCE_SLACK = 2.0             # s a date may precede the previous fetch (whole-second dates)


def engagement(value) -> float | None:
    """An engagement count within [0, MAX_ENGAGEMENT], or None when it is not a number."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    if x != x or x < 0:                      # NaN, negative
        return None
    return min(x, MAX_ENGAGEMENT)


def entry_value(value: float) -> float:
    """One entry's value within [0, MAX_ENTRY_VALUE] (NaN: 0)."""
    if value != value or value <= 0:
        return 0.0
    return value if value <= MAX_ENTRY_VALUE else MAX_ENTRY_VALUE


def entry_values(engagements: Sequence[float | None], default: float, scale: float
                 ) -> tuple[list[float], int]:
    """(values of entries, how many were clipped): engagement / ``scale`` where the entry has
    one, else ``default``; each within [0, MAX_ENTRY_VALUE]."""
    fallback = entry_value(default)
    clipped_default = fallback != default
    n = len(engagements)
    if engagements.count(None) == n:           # no feed shows engagement: the default each
        return [fallback] * n, n if clipped_default else 0
    out, clipped = [], 0
    top = MAX_ENTRY_VALUE * scale
    for e in engagements:
        if e is None:
            out.append(fallback)
            clipped += clipped_default
            continue
        if e.__class__ is float and 0.0 <= e <= MAX_ENGAGEMENT and e <= top:
            out.append(e / scale)              # the common case (NaN fails the tests)
            continue
        raw = engagement(e)
        v = 0.0 if raw is None else raw / scale
        if v > MAX_ENTRY_VALUE or raw != e:
            clipped += 1
            v = entry_value(v)
        out.append(v)
    return out, clipped


def outlier_times(times: list[float]) -> set[int]:
    """Indices of dates that lie far before all the others (with at least
    ``OUTLIER_MIN_DATES`` left): the oldest while its gap to the next one exceeds
    ``OUTLIER_GAP`` times the mean gap among the newer ones. For a Poisson stream a gap that
    long has probability about e^-20; at most a quarter of the dates are set aside."""
    n = len(times)
    ranked = sorted(times)                  # the dates in order; their indices only if needed
    order: list[int] | None = None
    out: set[int] = set()
    lo = 0
    while n - lo > OUTLIER_MIN_DATES and len(out) < max(1, n // 4):
        oldest, nxt, newest = ranked[lo], ranked[lo + 1], ranked[-1]
        mean_gap = (newest - nxt) / (n - lo - 2)
        if not nxt - oldest > OUTLIER_GAP * max(mean_gap, 1.0):
            break
        if order is None:
            order = sorted(range(n), key=times.__getitem__)
        out.add(order[lo])
        lo += 1
    return out


def learnable_times(published: Sequence, now: float, since: float | None
                    ) -> tuple[list[float], list[bool]]:
    """(publication times fit for learning, which were implausible and changed): each within
    [max(now - MAX_AGE, since - SINCE_SLACK), now], unknown or non-finite ones at ``now`` (not
    flagged: a missing date is not a lie); ``since`` is the time the source's previous
    successful fetch was sent (None: this is its first, and outliers (``outlier_times``) are
    set to ``now``)."""
    lo = now - MAX_AGE
    if since is not None and math.isfinite(since):
        lo = max(lo, since - SINCE_SLACK)
    n = len(published)
    try:                       # the common case: every date known and within the range
        total = sum(published)
        plain = total == total and abs(total) != math.inf and lo <= min(published) \
            and max(published) <= now
    except (TypeError, ValueError):
        plain = False
    if plain:                  # numbers all (ints too: a date of whole seconds is one)
        out, changed = list(published), [False] * n
    else:
        out, changed = _clip_times(published, lo, now)
    if since is None and n > OUTLIER_MIN_DATES:
        for j in outlier_times(out):
            out[j] = now
            changed[j] = True
    return out, changed


def _clip_times(published: Sequence, lo: float, now: float) -> tuple[list[float], list[bool]]:
    out, changed = [], []
    for p in published:
        try:
            t = float(p)
        except (TypeError, ValueError):
            t = math.nan
        if t != t or t in (math.inf, -math.inf):    # unknown: first seen now
            out.append(now)
            changed.append(False)
        elif t < lo:                                 # too old, before the previous fetch
            out.append(lo)
            changed.append(True)
        elif t > now:
            out.append(now)
            changed.append(True)
        else:
            out.append(t)
            changed.append(False)
    return out, changed


def burst_cap(peak: int) -> int:
    """New entries one fetch may teach the policy, after a fetch that taught ``peak``."""
    return max(BURST_MIN, BURST_FACTOR * int(peak))


def newest(published: list[float], k: int) -> list[float]:
    """The ``k`` latest of ``published`` (feed order otherwise kept)."""
    if len(published) <= k:
        return published
    cut = sorted(published, reverse=True)[k - 1]
    out, ties = [], sum(1 for p in published if p > cut)
    room = k - ties
    for p in published:
        if p > cut or (p == cut and room > 0):
            if p == cut:
                room -= 1
            out.append(p)
    return out


def feedback(value, age) -> tuple[float, float] | None:
    """(value, age) of a report fit for learning, or None: value finite >= 0 (clipped to
    MAX_ENTRY_VALUE), age finite in [0, MAX_AGE]."""
    try:
        v, a = float(value), float(age)
    except (TypeError, ValueError):
        return None
    if not (v >= 0 and v != math.inf and 0 <= a <= MAX_AGE):
        return None
    return min(v, MAX_ENTRY_VALUE), a
