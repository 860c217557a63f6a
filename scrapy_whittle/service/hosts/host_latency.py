"""Rising latency as a host's overload signal: a host that answers more and more slowly
while it is crawled is struggling, and is throttled as if it had answered 429.

Each host keeps two exponentially weighted means of the latency of its good answers (a feed,
a 304): a slow one, its ``baseline`` (what the host usually takes), and a fast one (what it
takes now). An answer is *slow* when it took more than ``factor`` times the baseline and more
than the baseline plus ``MARGIN`` seconds. The host is slowing down when its fast mean is
past that threshold too and its last ``MIN_SLOW`` slow answers in a row (no answer under the
threshold between them) came from at least ``MIN_SOURCES`` of its sources (or from every
source it has: a host of one feed is that feed).

Why this shape:

* The relative test (``factor``) is what overload looks like: a server's queue doubles its
  answer time, whatever that time was. The absolute margin keeps a fast host's noise out: a
  20 ms host answering in 45 ms is more than twice as slow and no sign of trouble.
* The source test keeps one feed from speaking for its host: a feed with a huge body, or
  one generated slowly, is slow every time, and its answers alone never cut its host. (The
  service does not see the bodies' sizes, so it cannot normalise by bytes; sources it sees.)
* The baseline learns from every answer, slowly (``BASELINE_WEIGHT``): a host that moved to a
  slower server, or a slow feed among fast ones, becomes the host's normal after some tens
  of answers, rather than a reason to throttle it for ever. The fast mean
  (``FAST_WEIGHT``) follows a change within a few answers; a single slow answer lifts it
  past the threshold, which is why the slow answers' sources are counted too.
* Nothing is judged before ``WARMUP`` answers: a baseline from one answer is a guess.

The cost is a few float operations per good answer, with no allocation once a host has
its entry.
"""

from __future__ import annotations

from collections.abc import Callable

INF = float("inf")

#: an answer's latency is slow beyond this multiple of its host's baseline (the default of
#: ``WHITTLE_HOST_LATENCY_FACTOR``)
FACTOR = 2.0
#: ... and beyond the baseline plus this many seconds: small absolute changes are noise
MARGIN = 1.0
#: the weight of each answer in the host's baseline (about the last 1 / w answers)
BASELINE_WEIGHT = 0.02
#: the weight of each answer in the host's fast mean
FAST_WEIGHT = 0.3
#: the answers a host gives before its latency is judged
WARMUP = 5
#: slow answers in a row that say the host is slowing down ...
MIN_SLOW = 3
#: ... from at least this many of its sources
MIN_SOURCES = 2


class HostLatency:
    """One host's latency: its baseline, its fast mean, its answers so far and its current
    run of slow answers (their count and sources)."""

    __slots__ = ("answers", "baseline", "fast", "slow", "sources")

    def __init__(self, latency: float) -> None:
        self.baseline = self.fast = latency
        self.answers = 1
        self.slow = 0
        self.sources: set[int] = set()


class LatencyWatch:
    """The hosts' latencies, by host id. ``factor``: an answer slower than this multiple of
    its host's baseline (and than the baseline plus ``margin``) is slow; 0 turns the watch
    off."""

    def __init__(self, factor: float = FACTOR, margin: float = MARGIN) -> None:
        self.factor, self.margin = float(factor), float(margin)
        self.enabled = self.factor > 0
        self.hosts: dict[int, HostLatency] = {}

    def slowing(self, hid: int, sid: int, latency: float,
                sources_of_host: Callable[[int], int]) -> bool:
        """Host ``hid``'s source ``sid`` answered well in ``latency`` seconds: whether the
        host is slowing down now (see the module docstring). ``sources_of_host(hid)``: how
        many sources the host has (asked only when fewer than ``MIN_SOURCES`` were slow). A True
        starts a new run: the next cut needs new evidence."""
        if not (self.enabled and 0.0 <= latency < INF):     # NaN, inf: nothing measured
            return False
        h = self.hosts.get(hid)
        if h is None:
            self.hosts[hid] = HostLatency(latency)
            return False
        threshold = max(self.factor * h.baseline, h.baseline + self.margin)
        h.fast += FAST_WEIGHT * (latency - h.fast)
        h.baseline += BASELINE_WEIGHT * (latency - h.baseline)
        h.answers += 1
        if latency <= threshold:
            if h.slow:
                h.slow = 0
                h.sources.clear()
            return False
        h.slow += 1
        h.sources.add(sid)
        if h.answers <= WARMUP or h.slow < MIN_SLOW or h.fast <= threshold:
            return False
        if len(h.sources) < MIN_SOURCES and len(h.sources) < sources_of_host(hid):
            return False
        h.slow = 0
        h.sources.clear()
        return True
