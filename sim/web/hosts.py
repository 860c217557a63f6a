"""Hosts between a policy and the simulated web: allowances in the plan, rate-limiting hosts.

A scenario with ``hosts`` (``news-hosts``) puts each source on a host; some hosts tell the
crawler an allowance (crawls per epoch, ``host_limits``), and some answer 429 above a rate
nobody told the crawler (``host_rates``). :class:`HostGate` runs one crawl's epochs:

* ``handling="allowance"``: the product's model. Each epoch's selection is the policy's
  choice with at most each host's allowance of crawls
  (:func:`~scrapy_whittle.core.selection.select_within_hosts`, caps from
  :class:`~scrapy_whittle.service.hosts.host_allowances.HostAllowances`), and a host that answers
  429 has its allowance cut (AIMD), per host, not per feed.
* ``handling="costs"``: the model of a host limit as a crawl cost and a saturated download
  slot. Each crawl of a limited host costs max(1, M / a_h) (a Crawl-delay of T / a_h
  seconds), the policy selects under the budget with those costs, and the crawls beyond
  the host's allowance in an epoch wait on the saturated slot and are not made (the budget
  they took is lost for the epoch).

Requests to a host are made one after another; a host with a rate answers 429 to those
beyond its rate in the epoch, and the crawler sends that host nothing more in the epoch
(with Retry-After, ``retry_after``: nothing in the next epoch either).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from scrapy_whittle.core.selection import select_within_hosts
from scrapy_whittle.service.hosts.host_allowances import HostAllowances

HANDLINGS = ("allowance", "costs")


def host_costs(scenario) -> np.ndarray:
    """C_i = max(1, M / a_h(i)) of each source (1 on hosts without an allowance)."""
    limits = scenario.host_limits[scenario.hosts]
    with np.errstate(divide="ignore"):
        return np.where(np.isfinite(limits), np.maximum(1.0, scenario.budget / limits), 1.0)


def costed(scenario):
    """The scenario with ``handling="costs"``'s crawl costs."""
    return replace(scenario, cost=host_costs(scenario))


class HostGate:
    """See the module docstring. Counts, per host: ``requests`` sent, ``rejected`` (429),
    those after the host's first 429 (``requests_after``, ``rejected_after``), and
    ``over_limit``: crawls beyond what the host's allowance accrued so far."""

    def __init__(self, scenario, handling: str = "allowance") -> None:
        if handling not in HANDLINGS:
            raise ValueError(f"handling must be one of {HANDLINGS}, got {handling!r}")
        self.handling = handling
        self.host = np.asarray(scenario.hosts, dtype=np.int64)
        self.limits = np.asarray(scenario.host_limits, dtype=np.float64)
        h = self.limits.shape[0]
        rates = scenario.host_rates
        self.rates = np.full(h, np.inf) if rates is None else np.asarray(rates, dtype=float)
        self.retry_after = bool(scenario.retry_after)
        self.names = [str(k) for k in range(h)]
        self.allowances = HostAllowances({self.names[k]: float(self.limits[k])
                                          for k in range(h) if np.isfinite(self.limits[k])})
        self.requests = np.zeros(h, dtype=np.int64)
        self.rejected = np.zeros(h, dtype=np.int64)
        self.requests_after = np.zeros(h, dtype=np.int64)
        self.rejected_after = np.zeros(h, dtype=np.int64)
        self.accepted = np.zeros(h, dtype=np.int64)
        self.over_limit = 0
        self._limited = np.zeros(h, dtype=np.int64)      # crawls sent to limited hosts
        self._held_until = np.full(h, -1)                 # Retry-After: nothing before
        self._epochs = 0

    def choose(self, policy, epoch: int, budget: float) -> np.ndarray:
        """The epoch's crawls, host limits applied."""
        self.allowances.start_epoch(epoch)
        caps = np.asarray(self.allowances.caps(self.names), dtype=np.float64)
        caps[self._held_until >= epoch] = 0.0
        if self.handling == "allowance":
            chosen = select_within_hosts(lambda b, e: policy.select(epoch, b, e),
                                         self.host, caps, budget)
        else:
            chosen = np.asarray(policy.select(epoch, budget), dtype=np.int64)
            chosen = chosen[_within(self.host[chosen], caps)]   # the saturated slot
        for k, count in enumerate(np.bincount(self.host[chosen], minlength=caps.shape[0])):
            if count:
                self.allowances.planned(self.names[k], int(count))
        return chosen

    def serve(self, epoch: int, chosen: np.ndarray) -> np.ndarray:
        """The crawls the hosts answered (the others got a 429), in ``chosen``'s order."""
        h = self.host[chosen]
        rank = _ranks(h)
        rates = self.rates[h]
        ok = rank < rates
        # the first 429 of a host stops its requests for the epoch
        sent = rank <= np.ceil(rates)
        counts = np.bincount(h[sent], minlength=self.rates.shape[0])
        refused = np.bincount(h[sent & ~ok], minlength=self.rates.shape[0])
        seen_429 = self.rejected > 0
        self.requests += counts
        self.rejected += refused
        self.requests_after += np.where(seen_429, counts, 0)
        self.rejected_after += np.where(seen_429, refused, 0)
        self.accepted += counts - refused
        for k in np.flatnonzero(counts - refused):
            self.allowances.answered(self.names[k], int(counts[k] - refused[k]))
        for k in np.flatnonzero(refused):
            self.allowances.overloaded(self.names[k], observed=float(counts[k]))
            if self.retry_after:
                self._held_until[k] = epoch + 1
        # crawls beyond what each limited host's allowance accrued since the start
        self._epochs += 1
        limited = np.isfinite(self.limits)
        self._limited += np.where(limited, counts, 0)
        accrued = np.floor(np.where(limited, self.limits, 0.0) * self._epochs + 1e-9)
        excess = np.where(limited, np.maximum(0, self._limited - accrued), 0).astype(np.int64)
        self.over_limit += int(excess.sum())
        self._limited -= excess
        return chosen[sent & ok]

    def summary(self, epochs: int) -> dict:
        """What the hosts saw, for the bench's results."""
        out = {"over_limit": self.over_limit, "rejected": int(self.rejected.sum())}
        limited = np.flatnonzero(np.isfinite(self.rates))
        for k in limited.tolist():
            after = int(self.requests_after[k])
            out[f"host{k}"] = {
                "rate": float(self.rates[k]),
                "accepted_per_epoch": float(self.accepted[k]) / max(1, epochs),
                "rejected": int(self.rejected[k]),
                "rejected_after_first": int(self.rejected_after[k]),
                "requests_after_first": after,
                "rejected_share_after_first": (self.rejected_after[k] / after
                                               if after else math.nan),
                "allowance": self.allowances.allowance(self.names[k]),
            }
        return out


def _ranks(h: np.ndarray) -> np.ndarray:
    """Position of each element among the elements with the same value (in order)."""
    order = np.argsort(h, kind="stable")
    rank = np.empty(h.shape[0], dtype=np.int64)
    rank[order] = np.arange(h.shape[0]) - np.searchsorted(h[order], h[order])
    return rank


def _within(h: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """Which elements are within their host's cap (first come, first kept)."""
    return _ranks(h) < caps[h]
