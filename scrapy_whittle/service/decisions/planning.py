"""Each decision step's plan: what the policy chose, handed out as the downloader takes it.

At the first ``next_crawl`` of a decision step (``WHITTLE_STEP``: a minute by default; one
step an epoch with ``WHITTLE_STEP = WHITTLE_PERIOD``) the policy picks sources of total cost
at most the share of M = ``WHITTLE_BUDGET`` due by the step's end, less what the epoch spent,
among those that may be fetched now (not in flight, not backing off, past
their minimum interval, host not saturated), each host within its allowance
(:mod:`~scrapy_whittle.service.hosts.host_throttle`: ``WHITTLE_HOST_LIMITS``, throttling); they
are handed out as the downloader takes them
(or spread evenly over the epoch with ``WHITTLE_SPREAD``); what an epoch does not use is
lost. With ``WHITTLE_DISCOVERY`` the sources never fetched are also fetched once, outside the
budget (:mod:`~scrapy_whittle.service.decisions.discovery`): counted under ``discovery/crawls``, not
in ``crawls`` nor in the budget spent. The retired sources' probes
(:mod:`~scrapy_whittle.service.sources.retirement`) are outside the budget too, under
``probes/crawls``. Both are within their hosts' allowances: an epoch's plan leaves a limited
host what its first fetches and probes due in the epoch take, and one its host has no crawl
left for waits for the next epoch."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

from scrapy_whittle.feeds.httpdates import http_date
from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.decisions.discovery import DiscoverySweep
from scrapy_whittle.service.decisions.epochs import EpochLedger, Timeline
from scrapy_whittle.service.decisions.outcomes import CrawlOutcomes
from scrapy_whittle.service.decisions.policy_keeper import PolicyKeeper
from scrapy_whittle.service.hosts.host_throttle import HostThrottle
from scrapy_whittle.service.sources.retirement import Retirement
from scrapy_whittle.service.sources.source_state import SourceState
from scrapy_whittle.service.sources.source_table import SourceTable
from scrapy_whittle.service.types import NO_LOAD, Crawl, HostLoad, Stats


class EpochPlanner:
    """The plan of epoch ``epoch`` (``plan``: its chosen sources in order, a deque since
    most crawls take the first), the cost ``spent`` of it so far, and ``wake_at``: when
    :meth:`next_crawl` may give something again. ``planned``: the plan's sources, as a set;
    ``sweep``: the discovery sweep (None without ``WHITTLE_DISCOVERY``)."""

    def __init__(self, config: WhittleConfig, *, timeline: Timeline, sources: SourceTable,
                 state: SourceState, stats: Stats, keeper: PolicyKeeper,
                 outcomes: CrawlOutcomes, ledger: EpochLedger, max_flight: float,
                 retirement: Retirement, throttle: HostThrottle) -> None:
        self.config = config
        self.throttle = throttle
        self.retirement = retirement
        self.timeline = timeline
        self.sources = sources
        self.state = state
        self.stats = stats
        self.keeper = keeper
        self.outcomes = outcomes
        self.ledger = ledger
        self.max_flight = max_flight
        self.epoch = -1
        self.step = -1                              # the decision step planned last
        self.epoch_budget = config.budget           # the budget of this epoch, this planner's
        self.plan: deque[int] = deque()
        self.planned: set[int] = set()
        self.sweep = (DiscoverySweep(config.period, sources, state) if config.discovery
                      else None)
        self.spent = 0.0
        self.wake_at = math.inf
        self.run_cost = 0.0                         # cost dispatched in this run
        self.spent_before: dict[int, float] = {}    # epoch -> cost spent by a previous planner
        throttle.queued = self.queued_of

    def next_crawl(self, hosts: HostLoad = NO_LOAD) -> Crawl | None:
        timeline = self.timeline
        if not len(self.sources) or timeline.finished:
            self.wake_at = math.inf
            return None
        now = timeline.clock.now()
        k, _ = self._epoch_now(now, hosts)
        throttle = self.throttle
        period = self.config.period
        origin = timeline.origin
        epoch_end = origin + (k + 1) * period
        sweep = self.sweep
        retirement = self.retirement
        loaded, admit = hosts, None
        if sweep is not None or retirement.probes:
            loaded = throttle.load(hosts, now)      # and the hosts in slow start
            # first fetches and probes spend their hosts' allowances (while some host has one)
            admit = throttle.admit if throttle.limited() else None
        if sweep is not None:
            sid = sweep.take(now, loaded, self.planned, epoch_end, admit)
            if sid is not None:
                return self._dispatch(sid, now, k, outside="discovery")
            epoch_end = min(epoch_end, sweep.next_due())
        if retirement.probes:
            sid = retirement.take(now, loaded, admit, epoch_end)
            if sid is not None:
                return self._dispatch(sid, now, k, outside="probes")
            due = retirement.next_due()
            if due > now:          # else its host is saturated: asked when a download ends
                epoch_end = min(epoch_end, due)
        later = min(epoch_end, timeline.step_end(self.step))     # the next step's plan
        src = self.sources
        # hosts found saturated in this call, and those a throttle stopped for the epoch
        stopped = self.throttle.stopped
        saturated: set[int] = stopped.copy() if stopped else set()
        paced, flying = throttle.paced, throttle.flying
        spread = self.config.spread
        host_of = src.host
        for j, sid in enumerate(self.plan):
            if spread:
                release = origin + k * period + self.spent * period / self.config.budget
                if release > now + 1e-9:
                    self.wake_at = min(release, epoch_end)
                    return None
            host = host_of.item(sid)
            if host in saturated:
                continue
            if paced and host in paced and paced[host] > now + 1e-6:
                later = min(later, paced[host])     # a throttled host's next crawl
                continue
            not_before = src.not_before(sid, now)
            if not_before > now + 1e-6:
                later = min(later, not_before)
                continue
            if (flying and host in flying and throttle.gated(host, now)) \
                    or hosts.saturated(src.host_names[host]):
                saturated.add(host)        # asked again when a download of the host ends
                continue
            del self.plan[j]
            self.planned.discard(sid)
            return self._dispatch(sid, now, k)
        self.wake_at = later
        return None

    def next_crawls(self, hosts: HostLoad, limit: int,
                    taken: Callable[[Crawl], None] | None = None) -> list[Crawl]:
        """Up to ``limit`` crawls to hand out now: those ``limit`` calls of
        :meth:`next_crawl` at this instant would give, in one pass over the plan (a call
        each starts again from the plan's head, where the sources of saturated hosts wait).
        ``taken(crawl)`` is called after each, so that ``hosts`` counts it before the next
        is chosen. With a discovery sweep, retired sources' probes or ``WHITTLE_SPREAD``, it
        is :meth:`next_crawl` called in turn."""
        out: list[Crawl] = []
        if self.sweep is not None or self.retirement.probes or self.config.spread:
            while len(out) < limit:
                crawl = self.next_crawl(hosts)
                if crawl is None:
                    break
                out.append(crawl)
                if taken is not None:
                    taken(crawl)
            return out
        timeline = self.timeline
        if not len(self.sources) or timeline.finished or limit <= 0:
            if limit > 0:
                self.wake_at = math.inf
            return out
        now = timeline.clock.now()
        k, started = self._epoch_now(now, hosts)
        if started and self.retirement.probes:          # (probes are taken one by one)
            return self.next_crawls(hosts, limit, taken)
        later = timeline.step_end(self.step)            # the next plan: step or epoch
        src = self.sources
        throttle = self.throttle
        stopped = throttle.stopped
        saturated: set[int] = stopped.copy() if stopped else set()
        paced, flying = throttle.paced, throttle.flying
        host_of, names = src.host, src.host_names
        kept: list[int] = []
        plan = self.plan
        scanned = 0
        for sid in plan:
            if len(out) >= limit:
                break
            scanned += 1
            host = host_of.item(sid)
            if host in saturated:
                kept.append(sid)
                continue
            if paced and host in paced and paced[host] > now + 1e-6:
                later = min(later, paced[host])     # a throttled host's next crawl
                kept.append(sid)
                continue
            not_before = src.not_before(sid, now)
            if not_before > now + 1e-6:
                later = min(later, not_before)
                kept.append(sid)
                continue
            if (flying and host in flying and throttle.gated(host, now)) \
                    or hosts.saturated(names[host]):
                saturated.add(host)        # (a host in its slow start: its answers first)
                kept.append(sid)
                continue
            self.planned.discard(sid)
            out.append(self._dispatch(sid, now, k))
            if taken is not None:
                taken(out[-1])
        for _ in range(scanned):          # the plan: what was passed over, then the rest
            plan.popleft()
        plan.extendleft(reversed(kept))
        if len(out) < limit:
            self.wake_at = later
        return out

    def _epoch_now(self, now: float, hosts: HostLoad) -> tuple[int, bool]:
        """The epoch of ``now``, learning what is due first; (epoch, whether a plan was made
        now, at the start of the epoch or of a decision step, the hosts saturated at this
        instant left out of it)."""
        self.outcomes.flush_if_due(now)
        timeline = self.timeline
        k = timeline.epoch_of(now)
        s = timeline.step_of(now)
        if k == self.epoch and s == self.step:
            return k, False
        busy = {self.sources.hosts[h] for h in hosts.all_saturated()
                if h in self.sources.hosts}
        if k != self.epoch:
            self._start_epoch(k, now, busy)
        else:
            self._start_step(s, now, busy)
        return k, True

    def discover(self, ids, now: float) -> None:
        """Sources ``ids`` joined the crawl at ``now``: with ``WHITTLE_DISCOVERY``, those
        never fetched are swept over the next period."""
        if self.sweep is not None and self.sweep.add(ids, now):
            self.wake_at = min(self.wake_at, self.sweep.next_due())

    def queued(self) -> int:
        """Crawls waiting to be handed out: the plan's and the sweep's."""
        return len(self.plan) + (len(self.sweep) if self.sweep is not None else 0)

    def queued_of(self, host: int) -> int:
        """Crawls of host ``host`` the current plan still holds."""
        host_of = self.sources.host
        return sum(1 for sid in self.plan if host_of.item(sid) == host)

    def resume_spent(self, spent: dict[int, float]) -> None:
        self.spent_before.update(spent)

    def drop_left(self) -> None:
        """Sources that left the list are not handed out any more."""
        left = self.sources.left
        self.plan = deque(sid for sid in self.plan if not left[sid])
        self.planned = set(self.plan)

    def _start_epoch(self, k: int, now: float, busy: set[int]) -> None:
        self.outcomes.flush()
        if self.plan:
            self.stats.inc("skipped", len(self.plan))
        self.epoch, self.spent = k, 0.0
        self.keeper.grow()
        resumed = k in self.spent_before
        self.epoch_budget = self.config.budget - self.spent_before.pop(k, 0.0)
        exclude = None
        if resumed:
            # an epoch a previous planner began (a cluster's take-over): the sources it
            # crawled already in this epoch wait for the next, as in one plan
            exclude = self.sources.last_crawl >= (
                self.timeline.origin + k * self.config.period)
        self.stats.inc("epochs")
        self._plan_step(self.timeline.step_of(now), now, busy, True, exclude)

    def _start_step(self, s: int, now: float, busy: set[int]) -> None:
        """A decision step within the epoch: what the crawls since the last one taught is
        learned, and the plan made again, for the budget due by the step's end (what the
        last plan did not hand out gives its hosts' allowances back)."""
        self.outcomes.flush()
        if self.plan:
            self.stats.inc("skipped", len(self.plan))
            self.throttle.unplanned(self.plan)
        self._plan_step(s, now, busy, False, None)

    def _plan_step(self, s: int, now: float, busy: set[int], new_epoch: bool,
                   exclude) -> None:
        """Plan decision step ``s`` of the current epoch: the budget due by its end (the
        epoch's budget in proportion to the time elapsed, what earlier steps left unspent
        included) less what the epoch spent, chosen by the policy at the step's time."""
        timeline = self.timeline
        k = self.epoch
        self.step = s
        end = timeline.step_end(s)
        eligible = self.sources.eligible(now, busy, horizon=end)
        if exclude is not None:
            eligible = eligible & ~exclude[:eligible.shape[0]]
        share = (s - k * timeline.steps + 1) / timeline.steps
        budget = self.epoch_budget - self.spent
        if timeline.steps > 1:
            # (the slack: a whole crawl due by a step's end, summed in shares, is one)
            budget = self.epoch_budget * min(1.0, share) - self.spent + 1e-9
        keeper = self.keeper
        at = timeline.policy_epoch(s)
        chosen = self.throttle.select(lambda b, e: keeper.select(at, b, e), k, budget,
                                      self.sources.cost[:eligible.shape[0]],
                                      None if eligible.all() else eligible, now,
                                      reserved=self._outside_due, new_epoch=new_epoch)
        self.plan = deque(map(int, chosen))
        self.planned = set(self.plan) if self.sweep is not None else set()

    def _outside_due(self) -> list[int]:
        """The sources to be fetched outside the plan in this epoch: first fetches, probes."""
        end = self.timeline.origin + (self.epoch + 1) * self.config.period
        out = self.retirement.due_by(end)
        if self.sweep is not None:
            out += self.sweep.due_by(end)
        return out

    def _dispatch(self, sid: int, now: float, epoch: int, outside: str | None = None
                  ) -> Crawl:
        """Hand out ``sid``: within the budget, or ``outside`` it (``"discovery"``,
        ``"probes"``: the stat it is counted under)."""
        src, state = self.sources, self.state
        src.dispatched(sid, now + self.max_flight)
        self.throttle.dispatched(sid, now, now + self.max_flight)
        stats = self.stats
        if outside:                       # outside the budget: its own count
            stats.inc(f"{outside}/crawls")
        else:
            cost = src.cost.item(sid)
            self.spent += cost
            stats.inc("crawls")
            stats.inc("crawls/cost", cost)
            totals = self.ledger.totals[epoch]
            totals.crawls += 1
            totals.cost += cost
            self.run_cost += cost
        state.crawls[sid] += 1
        if state.track_changes:
            state.dirty[sid] = True
        headers = {}
        if self.config.conditional_get:
            etag = state.etag.get(sid)
            if etag:
                headers["If-None-Match"] = etag
            modified = state.modified.item(sid)
            if modified:
                headers["If-Modified-Since"] = http_date(modified)
        return Crawl(sid, src.url(sid), epoch, now, headers)

    def budget_used(self, now: float) -> float | None:
        """Cost spent over the completed epochs of this run / (M x those epochs)."""
        timeline = self.timeline
        if timeline.origin is None or timeline.first_epoch is None:
            return None
        done = timeline.epoch_of(now)
        n_epochs = done - timeline.first_epoch
        if n_epochs <= 0:
            return None
        spent = self.run_cost - (self.spent if self.epoch >= done else 0.0)
        return spent / (self.config.budget * n_epochs)
