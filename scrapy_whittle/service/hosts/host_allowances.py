"""Per-host allowances: how many crawls of a host's sources an epoch may plan.

A host's limit is the least of its ``WHITTLE_HOST_LIMITS`` (crawls per epoch) and what its
delay allows: a host that must be left d seconds between two requests (robots.txt
``Crawl-delay``, a ``DOWNLOAD_SLOTS`` delay, or ``DOWNLOAD_DELAY``, which holds for every
host) takes floor(T / d) crawls per epoch of T seconds (T / d, a fraction, when d > T). It is
a constraint of the selection
(:func:`~scrapy_whittle.core.selection.select_within_hosts`): the policy takes each host's
best sources within its allowance, and what a host cannot take goes to other hosts in the
same epoch. A host that says it is overloaded (a 429 or 503, with or without Retry-After, or
a burst of 403s) has its allowance learned from its refusals (below); the allowance is per
host, not per feed, so a host's fifty feeds do not each find the limit.

What a host bears is learned with two numbers, in crawls per epoch:

* the *allowance*: what the plan may give the host now (its crawls paced T / allowance
  apart once it is throttled: :mod:`~scrapy_whittle.service.hosts.host_throttle`);
* the *ceiling*: what the host is believed to bear, where recovery after a cut stops.

A refusal at or below the ceiling (the host bears less than believed, or its first refusal)
is a *cut*: the allowance is multiplied by ``DECREASE`` (from what the crawl sent it, for a
host not limited yet), at most once an epoch (one overload seen by many of the host's feeds
is one signal), and the ceiling becomes what the host bore: its good answers of the epoch
over the share of the epoch gone by (``share``), no less than the cut and no more than the
rate refused (and, refused at a ceiling it had learned, below that ceiling). That rate is
an estimate from a partial epoch: early in an epoch (decision steps of a minute, a host
refusing a few requests in) it rests on a count of a few answers, and it falls to the cut
itself when the host bore less than that. So the ceiling is not final: each epoch of good
answers gives back ``INCREASE`` of the ceiling (additive increase), and once the host has
answered ``PROBE_ANSWERS`` requests at its ceiling, in epochs whose plan took its whole
allowance, the allowance *probes* one step above it (one crawl an epoch, or ``INCREASE`` of
the ceiling if more). An epoch in which the host answered more than its ceiling, refusing
nothing, raises the ceiling to what it answered (and the next probe follows
``PROBE_ANSWERS`` answers later): the allowance climbs to what the host bears one step at a
time, and only the step it does not bear costs a refusal. A refused probe is not a cut:
the host bore the ceiling, so the allowance goes back to it (halving it would lose half of
what the host bears at every probe), and the ceiling is then known to be within a step of
what the host bears: the next probe waits ``PROBE_AFTER`` epochs at the ceiling (the host
may bear more later), so a host found costs one refusal in that many epochs. Probes and
climbs are counted in answers and epochs, never in decision steps: the same whether an
epoch is planned once or every minute.

Article requests (``WHITTLE_ARTICLES``) to a host spend the same credit, after its feeds
(:meth:`HostAllowances.admit_article`): a host's requests of both kinds stay within its
allowance, and its feeds are planned as they would be without articles.

Fractional allowances (one crawl every few epochs) are spent through a credit: an epoch may
plan the whole part of what the host has accrued, and unspent credit does not pile up
beyond one epoch's allowance (at least one crawl).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

#: an overload signal multiplies the host's allowance by this
DECREASE = 0.5
#: an epoch of good answers gives back this share of the host's ceiling (at least FLOOR);
#: a probe above the ceiling is this share of it (at least one crawl)
INCREASE = 0.1
#: good answers at a ceiling learned from a cut before the allowance probes above it (a
#: couple of epochs of a host bearing ten): a refused probe costs one refusal in as many
PROBE_ANSWERS = 20
#: epochs of good answers at a ceiling found by a refused probe before the next probe
PROBE_AFTER = 100
#: an allowance never falls below this (crawls per epoch): the host is still probed
FLOOR = 0.1
#: 403 answers of one host in one epoch that read as a rate limit, not as forbidden feeds
FORBIDDEN_BURST = 3


@dataclass
class HostAllowance:
    """One host's allowance (crawls per epoch; inf = no limit), its credit, and this epoch's
    answers."""

    limit: float = math.inf          # the least of configured and delay_limit (inf: none)
    configured: float = math.inf     # WHITTLE_HOST_LIMITS (inf: none)
    delay: float = 0.0               # seconds between two requests (0: none)
    allowance: float = math.inf      # current
    ceiling: float = math.inf        # learned: what the host is believed to bear
    calm: int = 0                    # good epochs in a row at the ceiling
    calm_answers: int = 0            # and the good answers of those epochs
    found: bool = False              # a probe above the ceiling was refused: it is tight
    credit: float = 0.0
    planned: int = 0                 # crawls planned for it this epoch
    ok: int = 0                      # good answers this epoch
    forbidden: int = 0               # 403s this epoch
    cut_in: int = -1                 # the last epoch whose overload cut the allowance
    throttles: int = 0               # cuts so far
    articles: int = 0                # article requests this epoch (WHITTLE_ARTICLES)
    feeds_before: int = 0            # crawls planned for it in the last epoch


def delay_limit(delay: float, period: float) -> float:
    """Crawls per epoch of ``period`` seconds a host allows whose requests must be ``delay``
    seconds apart: floor(period / delay), or that fraction below one (inf without a delay)."""
    if not delay > 0:
        return math.inf
    per_epoch = period / delay
    return float(math.floor(per_epoch + 1e-9)) if per_epoch >= 1 else per_epoch


class HostAllowances:
    """The allowances of the hosts that have one (configured, delayed or throttled), by host
    name. ``period``: the epoch's length (s), what a delay is counted against;
    ``default_delay``: the delay of every host (``DOWNLOAD_DELAY``): a host without an entry
    has the allowance it gives (``default``), and gets an entry once it is planned."""

    def __init__(self, limits: dict[str, float] | None = None, *, decrease: float = DECREASE,
                 increase: float = INCREASE, floor: float = FLOOR, period: float = 1.0,
                 slot_delays: dict[str, float] | None = None, default_delay: float = 0.0
                 ) -> None:
        if not 0 < decrease < 1:
            raise ValueError(f"decrease ({decrease!r}) must lie in (0, 1)")
        self.decrease, self.increase, self.floor = float(decrease), float(increase), float(floor)
        self.period = float(period)
        self.default_delay = float(default_delay) if default_delay > 0 else 0.0
        #: the allowance of a host without an entry (inf: none)
        self.default = delay_limit(self.default_delay, self.period)
        #: a host's own delay in place of the default (DOWNLOAD_SLOTS), robots.txt's
        self.slot_delays = {h: float(d) for h, d in (slot_delays or {}).items()}
        self.crawl_delays: dict[str, float] = {}
        self.hosts: dict[str, HostAllowance] = {}
        self.epoch = -1
        for host, limit in (limits or {}).items():
            self._entry(host).configured = float(limit)
        for host in [*(limits or {}), *self.slot_delays]:
            self._set_limit(self._entry(host))

    def delay_of(self, host: str) -> float:
        """The seconds ``host``'s requests are apart: its slot's delay (else the default),
        or its robots.txt ``Crawl-delay`` if longer."""
        return max(self.slot_delays.get(host, self.default_delay),
                   self.crawl_delays.get(host, 0.0))

    def _entry(self, host: str) -> HostAllowance:
        """``host``'s entry, made (with its delay's allowance, its credit a whole epoch's)
        if it has none."""
        h = self.hosts.get(host)
        if h is None:
            delay = self.delay_of(host)
            d = delay_limit(delay, self.period)
            h = self.hosts[host] = HostAllowance(
                limit=d, allowance=d, delay=delay,
                credit=max(1.0, d) if math.isfinite(d) else 0.0)
        return h

    def _set_limit(self, h: HostAllowance) -> None:
        """``h``'s limit from its configured one and its delay; a host not throttled is
        allowed its limit, a throttled one no more than it."""
        h.limit = min(h.configured, delay_limit(h.delay, self.period))
        h.allowance = min(h.allowance, h.limit) if h.throttles else h.limit
        h.ceiling = min(h.ceiling, h.limit)

    def set_crawl_delay(self, host: str, delay: float) -> bool:
        """``host``'s robots.txt asks for ``delay`` seconds between two requests: its
        allowance is at most what that leaves an epoch (or what its download slot's delay
        leaves, if longer). Returns whether its limit changed."""
        if not (math.isfinite(delay) and delay > 0) or self.crawl_delays.get(host) == delay:
            return False
        h = self._entry(host)
        before = h.limit
        self.crawl_delays[host] = float(delay)
        h.delay = self.delay_of(host)
        self._set_limit(h)
        return h.limit != before

    def limited(self) -> bool:
        """Whether any host has a finite allowance."""
        return math.isfinite(self.default) or any(math.isfinite(h.allowance)
                                                  for h in self.hosts.values())

    def allowance(self, host: str) -> float:
        h = self.hosts.get(host)
        return self.default if h is None else h.allowance

    def start_epoch(self, epoch: int) -> None:
        """Epoch ``epoch`` begins: the last one's good answers raise allowances, and each
        limited host accrues its allowance."""
        for h in self.hosts.values():
            if h.cut_in < self.epoch and h.ok:
                self._recover(h)
            h.feeds_before = h.planned
            h.planned = h.ok = h.forbidden = h.articles = 0
            if math.isfinite(h.allowance):
                h.credit = min(h.credit + h.allowance, max(1.0, h.allowance))
        self.epoch = epoch

    def _recover(self, h: HostAllowance) -> None:
        """After a good epoch: additive increase back towards the learned ceiling; at the
        ceiling, a probe above it once the host answered enough there (PROBE_ANSWERS, or
        PROBE_AFTER epochs once a probe was refused); a probe the host answered beyond its
        ceiling raises the ceiling (see the module docstring)."""
        top = min(h.limit, h.ceiling)
        if h.allowance < top:
            h.allowance = min(top, h.allowance + max(self.floor, self.increase * top))
            h.calm = h.calm_answers = 0
        elif h.allowance > h.ceiling:        # probing: did it bear more than its ceiling?
            if h.ok > h.ceiling:             # it did: it may bear more still
                h.ceiling = min(h.allowance, float(h.ok))
                h.calm = h.calm_answers = 0
                h.found = False
        elif h.ceiling < h.limit and \
                h.planned + h.articles >= math.floor(h.allowance + 1e-9):
            # (only while the host's feeds take its whole allowance: one whose plan wants
            # less has nothing to gain from a probe, and the probe would show nothing)
            h.calm += 1
            h.calm_answers += h.ok
            if h.calm >= PROBE_AFTER or (not h.found and h.calm_answers >= PROBE_ANSWERS):
                h.allowance = min(h.limit, self._probe(h.ceiling))
                h.calm = h.calm_answers = 0

    def _probe(self, ceiling: float) -> float:
        """The allowance a probe above ``ceiling`` tries: one step (a crawl an epoch, or
        INCREASE of the ceiling if more) above its whole part, so that the credit, spent
        in whole crawls, does try it."""
        whole = math.floor(ceiling + 1e-9)
        return whole + max(1.0, math.floor(self.increase * ceiling + 1e-9))

    def caps(self, names: Iterable[str]) -> list[float]:
        """This epoch's cap (crawls) of each host in ``names``: inf without an allowance."""
        out = []
        for name in names:
            h = self.hosts.get(name)
            if h is None:
                out.append(self.default_cap)
            else:
                out.append(math.inf if not math.isfinite(h.allowance)
                           else math.floor(h.credit + 1e-9))
        return out

    @property
    def default_cap(self) -> float:
        """The cap of a host without an entry: a whole epoch's credit of the default."""
        d = self.default
        return d if not math.isfinite(d) else float(math.floor(max(1.0, d) + 1e-9))

    def planned(self, host: str, crawls: int = 1) -> None:
        """``crawls`` of ``host`` were planned (spent from its credit)."""
        h = self.hosts.get(host)
        if h is None and math.isfinite(self.default):
            h = self._entry(host)
        if h is not None:
            h.planned += crawls
            if math.isfinite(h.allowance):
                h.credit -= crawls

    def admit(self, host: str) -> bool:
        """One crawl of ``host`` outside the plan (a first fetch, a probe) may go now if its
        credit of this epoch holds one (it is spent: :meth:`planned`)."""
        h = self.hosts.get(host)
        if h is None and not math.isfinite(self.default):
            return True
        cap = self.caps((host,))[0]
        if cap < 1:
            return False
        self.planned(host)
        return True

    def admit_article(self, host: str, due: float = 1.0) -> bool:
        """One article request to ``host`` may go now (it is spent from the credit) if the
        credit holds one beyond what the host's feeds are likely to take still this epoch
        (as many crawls as the last epoch planned, less those planned so far): the feeds
        go first, the articles take what they leave. ``due``: the share of the epoch's
        allowance accrued when the current decision step began (steps plan the feeds as the
        epoch goes): the host's requests of both kinds stay within that share."""
        h = self.hosts.get(host)
        if h is None:
            if not math.isfinite(self.default):
                return True
            h = self._entry(host)
        if not math.isfinite(h.allowance):
            h.articles += 1
            return True
        reserve = max(0, h.feeds_before - h.planned)
        if math.floor(h.credit + 1e-9) - reserve < 1:
            return False
        if due < 1.0 and h.planned + h.articles + 1 > math.floor(h.allowance * due + 1e-9):
            return False
        h.credit -= 1
        h.articles += 1
        return True

    def article_room(self, skip: frozenset[str] = frozenset()) -> dict[str, int]:
        """Each host with a finite allowance (but those of ``skip``): the article requests
        it may take now, all spent from its credit at once, as :meth:`admit_article` would
        admit them one by one (0: none now). A cluster's planner grants them to its
        workers, which cannot ask it request by request."""
        out = {}
        for host, h in self.hosts.items():
            if not math.isfinite(h.allowance):
                continue
            room = 0
            if host not in skip:
                room = max(0, math.floor(h.credit + 1e-9) - max(0, h.feeds_before - h.planned))
            h.credit -= room
            h.articles += room
            out[host] = room
        return out

    def answered(self, host: str, count: int = 1) -> None:
        """``count`` good answers (a feed, a 304) from ``host``."""
        self._entry(host).ok += count

    def overloaded(self, host: str, observed: float | None = None,
                   share: float = 1.0) -> bool:
        """``host`` answered 429 or 503, at most one signal an epoch. Refused at a probe
        above its ceiling, its allowance goes back to the ceiling; else it is cut, from
        what it has (or, unlimited so far, from ``observed``: its crawls per epoch lately,
        else this epoch's plan of it, at least one), and what it bore this epoch (its good
        answers, over the ``share`` of the epoch gone by with decision steps) becomes its
        ceiling (see the module docstring). Returns whether this answer cut it."""
        h = self._entry(host)
        if h.cut_in == self.epoch:
            return False
        if math.isfinite(h.allowance) and h.allowance > h.ceiling:
            # a probe refused: the host bore its ceiling, and bears less than one step more
            h.allowance = h.ceiling
            h.found = True
        else:
            base = h.allowance
            if not math.isfinite(base):
                base = max(1.0, float(observed if observed is not None else h.planned))
            cut = max(self.floor, self.decrease * base)
            # the host bore its good answers of this epoch (a rate over the share gone by),
            # but not the rate it refused: recovery stops there, probing goes on from it
            bore = min(h.ok / share, base)
            if h.throttles and base >= h.ceiling:
                bore = min(bore, base - 1.0)   # refused at its learned ceiling: below it
            h.ceiling = min(h.ceiling, max(cut, bore))
            h.allowance = cut
            h.found = False
        h.credit = min(h.credit, 0.0)      # nothing more this epoch
        h.cut_in = self.epoch
        h.calm = h.calm_answers = 0
        h.throttles += 1
        return True

    def probing(self, host: str) -> bool:
        """Whether ``host``'s allowance is probing above its ceiling."""
        h = self.hosts.get(host)
        return h is not None and math.isfinite(h.allowance) and h.allowance > h.ceiling

    def forbidden(self, host: str, observed: float | None = None) -> bool:
        """A 403 from ``host``: a burst of them in one epoch reads as a rate limit."""
        h = self._entry(host)
        h.forbidden += 1
        return h.forbidden >= FORBIDDEN_BURST and self.overloaded(host, observed)

    def throttled(self) -> dict[str, float]:
        """Hosts whose allowance is below their limit: host -> allowance."""
        return {name: h.allowance for name, h in self.hosts.items() if h.throttles}

    # -- persistence --------------------------------------------------------------------
    def rows(self) -> list[tuple[str, float, float, int]]:
        """(host, allowance, ceiling, throttles) of each throttled host, for the store."""
        return [(name, h.allowance, h.ceiling, h.throttles)
                for name, h in self.hosts.items() if h.throttles]

    def load_rows(self, rows) -> None:
        """Restore :meth:`rows`; the configured limits (this run's) stay."""
        for name, allowance, ceiling, throttles in rows:
            h = self._entry(name)
            h.ceiling = min(float(ceiling), h.limit)
            h.allowance = min(float(allowance), h.ceiling)
            h.throttles = int(throttles)
            # (how it was found is not kept: a restarted crawl probes the ceiling as
            # rarely as a found one, rather than refusing again soon after each restart)
            h.found = True
