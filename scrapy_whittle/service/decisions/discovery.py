"""The discovery sweep (``WHITTLE_DISCOVERY``): a first fetch of every source never fetched,
outside the budget, as a feed reader fetches a feed on subscribe.

Sources join the sweep when the service opens (those never fetched: a restarted crawl does not
sweep the others) and whenever the list or a spider adds some. The n sources that join at time
t are due at t + i T / n (i = 0 .. n - 1, T = ``WHITTLE_PERIOD``): the sweep is spread over the
period after they joined rather than sent at once, in an order that interleaves their hosts,
so that a list of many feeds of one site does not queue them back to back on its download slot. A
first fetch spends a crawl of its host's allowance
(:mod:`~scrapy_whittle.service.hosts.host_throttle`: a limit, a delay, a throttle): the plan of an
epoch leaves the host what the sweep's sources due in the epoch take, and a source whose host has
none left waits for the next epoch.
A source whose host cannot take a request waits in its host's queue, asked about once a call
per host however many of its sources wait. A source the budget's plan fetches first, or that
left the list, is dropped; one in the current plan waits until the plan's epoch is over."""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable

import numpy as np

from scrapy_whittle.service.sources.source_state import SourceState
from scrapy_whittle.service.sources.source_table import SourceTable
from scrapy_whittle.service.types import HostLoad


class DiscoverySweep:
    """Sources awaiting their first fetch: ``due``, a heap of (due time, source id), and
    ``waiting``: per host id, the sources found due while the host could take no request."""

    def __init__(self, period: float, sources: SourceTable, state: SourceState) -> None:
        self.period = period
        self.sources = sources
        self.state = state
        self.due: list[tuple[float, int]] = []
        self.waiting: dict[int, deque[int]] = {}

    def __len__(self) -> int:
        return len(self.due) + sum(map(len, self.waiting.values()))

    def add(self, ids, now: float) -> int:
        """Sources ``ids`` joined at ``now``: those never fetched are due over the next
        period. Returns how many joined the sweep."""
        ids = np.asarray(ids, dtype=np.int64)
        ids = ids[(self.state.crawls[ids] == 0) & ~self.sources.left[ids]]
        n = ids.shape[0]
        if not n:
            return 0
        ids = interleaved_by_host(ids, self.sources.host[ids])
        due = now + self.period * np.arange(n) / n
        entries = list(zip(due.tolist(), ids.tolist(), strict=True))
        if len(entries) > len(self.due):
            self.due.extend(entries)
            heapq.heapify(self.due)
        else:
            for entry in entries:
                heapq.heappush(self.due, entry)
        return n

    def next_due(self) -> float:
        """When a source of the heap is due next (those waiting for their host are asked
        about when one of its downloads ends)."""
        return self.due[0][0] if self.due else math.inf

    def due_by(self, when: float) -> list[int]:
        """The sources to be swept before ``when`` (those waiting for their host too)."""
        out = [sid for due, sid in self.due if due < when]
        for queue in self.waiting.values():
            out.extend(queue)
        return out

    def take(self, now: float, hosts: HostLoad, planned: set[int], plan_ends: float,
             admit: Callable[[int], bool] | None = None) -> int | None:
        """A source due now that may be fetched now, or None. ``planned``: the sources the
        current plan will fetch (by ``plan_ends``); ``admit(sid)``: whether its host's
        allowance lets it go this epoch (else it waits until ``plan_ends``)."""
        names = self.sources.host_names
        for host, queue in list(self.waiting.items()):
            if hosts.saturated(names[host]):
                continue
            while queue:
                sid = queue.popleft()
                if self._ready(sid, now, planned, plan_ends):
                    if admit is not None and not admit(sid):
                        queue.appendleft(sid)
                        self._defer(host, plan_ends)
                        break
                    if not queue:
                        del self.waiting[host]
                    return sid
            else:
                del self.waiting[host]
        host_of = self.sources.host
        while self.due and self.due[0][0] <= now + 1e-9:
            _, sid = heapq.heappop(self.due)
            if not self._ready(sid, now, planned, plan_ends):
                continue
            host = host_of.item(sid)
            queue = self.waiting.get(host)
            if queue is not None or hosts.saturated(names[host]):
                # behind the host's sources that wait already, in the order they were due
                self.waiting.setdefault(host, deque()).append(sid)
                continue
            if admit is not None and not admit(sid):
                heapq.heappush(self.due, (plan_ends, sid))   # its host's allowance is spent
                continue
            return sid
        return None

    def _defer(self, host: int, when: float) -> None:
        """Host ``host``'s waiting sources go back to the heap, due at ``when`` (its
        allowance of this epoch is spent)."""
        for sid in self.waiting.pop(host, ()):
            heapq.heappush(self.due, (when, sid))

    def _ready(self, sid: int, now: float, planned: set[int], plan_ends: float) -> bool:
        """Whether ``sid`` may be swept now; if it may later, it goes back to the heap."""
        if self.state.crawls.item(sid) or self.sources.left.item(sid):
            return False                        # fetched already, or left the list
        if sid in planned:
            heapq.heappush(self.due, (plan_ends, sid))
            return False
        not_before = self.sources.not_before(sid, now)
        if not_before > now + 1e-6:
            heapq.heappush(self.due, (not_before, sid))
            return False
        return True


def interleaved_by_host(ids: np.ndarray, hosts: np.ndarray) -> np.ndarray:
    """``ids`` in rounds: the first source of each host, then the second of each, ...; hosts
    in order of first appearance, each host's sources in their given order."""
    order = np.argsort(hosts, kind="stable")
    sorted_hosts = hosts[order]
    starts = np.flatnonzero(np.r_[True, sorted_hosts[1:] != sorted_hosts[:-1]])
    sizes = np.diff(np.r_[starts, sorted_hosts.shape[0]])
    rank = np.empty(ids.shape[0], dtype=np.int64)
    rank[order] = np.arange(ids.shape[0]) - np.repeat(starts, sizes)
    first_seen = np.empty(ids.shape[0], dtype=np.int64)
    first_seen[order] = np.repeat(order[starts], sizes)
    return ids[np.lexsort((first_seen, rank))]
