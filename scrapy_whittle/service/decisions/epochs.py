"""The service's epochs: where they start (:class:`Timeline`) and what each one did
(:class:`EpochTotals`, the entries missed and the discovery delays of
:mod:`~scrapy_whittle.service.decisions.measures`, gathered by an :class:`EpochLedger` until the
next checkpoint).

Epoch k is [origin + k T, origin + (k + 1) T), T = ``WHITTLE_PERIOD``; the origin is the first
run's start (kept by the store), so a resumed crawl continues its epochs."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import NamedTuple

from scrapy_whittle.service.decisions.measures import DelayHistogram


@dataclass(slots=True)
class EpochTotals:
    """What the crawls of one epoch of dispatch did (the store adds these up per epoch)."""

    crawls: int = 0
    cost: float = 0.0
    new_items: int = 0
    utility: float = 0.0
    errors: int = 0
    not_modified: int = 0


class LedgerRows(NamedTuple):
    """What the epochs did since the last checkpoint, as the store's rows: ``epochs`` (epoch,
    crawls, cost, new items, utility, errors, 304s), ``errors`` (epoch, kind, count),
    ``measures`` (epoch, entries missed, sum of the delays in seconds), ``delays`` (epoch,
    bin, count)."""

    epochs: list[tuple]
    errors: list[tuple[int, str, int]]
    measures: list[tuple[int, float, float]]
    delays: list[tuple[int, int, int]]


class EpochLedger:
    """The epochs' totals, error counts, entries missed and discovery delays since the last
    checkpoint."""

    def __init__(self) -> None:
        self.totals: defaultdict[int, EpochTotals] = defaultdict(EpochTotals)
        self.errors: defaultdict[tuple[int, str], int] = defaultdict(int)
        self.missed: defaultdict[int, float] = defaultdict(float)
        self.delays: defaultdict[int, DelayHistogram] = defaultdict(DelayHistogram)

    def drain(self) -> LedgerRows:
        """The rows for a checkpoint; the ledger starts again from zero."""
        rows = [(k, int(t.crawls), float(t.cost), int(t.new_items), float(t.utility),
                 int(t.errors), int(t.not_modified)) for k, t in self.totals.items()]
        errors = [(k, kind, n) for (k, kind), n in self.errors.items()]
        delays = self.delays
        measures = [(k, float(self.missed.get(k, 0.0)),
                     delays[k].seconds if k in delays else 0.0)
                    for k in sorted(self.missed.keys() | delays.keys())]
        delay_rows = [row for k in sorted(delays) for row in delays[k].rows(k)]
        self.totals.clear()
        self.errors.clear()
        self.missed.clear()
        delays.clear()
        return LedgerRows(rows, errors, measures, delay_rows)

    def __getitem__(self, epoch: int) -> EpochTotals:
        return self.totals[epoch]


class Timeline:
    """Which epoch and which decision step an instant falls in, and whether this run's
    ``WHITTLE_MAX_EPOCHS`` passed. ``origin`` and ``first_epoch`` are known once the service
    opened.

    An epoch (``WHITTLE_PERIOD``) is the budget's unit and the ledger's row; it holds
    ``steps`` decision steps (``WHITTLE_STEP``), step s being [origin + s P / steps, origin +
    (s + 1) P / steps). The policy's clock counts in epochs: step s is epoch s / steps
    (``policy_epoch``; whole with one step an epoch), so that what a policy learned stays
    valid whatever the step, and a crawl's state resumes under another one."""

    def __init__(self, clock, period: float, max_epochs: int | None, steps: int = 1) -> None:
        self.clock = clock
        self.period = period
        self.max_epochs = max_epochs
        self.steps = int(steps)
        self.step = period / self.steps
        self.origin: float | None = None
        self.first_epoch: int | None = None

    def epoch_of(self, when: float) -> int:
        return math.floor((when - self.origin) / self.period)

    def step_of(self, when: float) -> int:
        """The decision step ``when`` falls in (within ``epoch_of(when)``)."""
        if self.steps == 1:
            return self.epoch_of(when)
        step = math.floor((when - self.origin) / self.step)
        # (rounding at an epoch's boundary: the step belongs to the epoch of the instant)
        return min(max(step, self.epoch_of(when) * self.steps),
                   self.epoch_of(when) * self.steps + self.steps - 1)

    def policy_epoch(self, step: int) -> float:
        """The policy's time of decision step ``step``, in epochs."""
        return step if self.steps == 1 else step / self.steps

    def step_end(self, step: int) -> float:
        """When decision step ``step`` ends."""
        return self.origin + (step + 1) * self.step if self.steps > 1 else \
            self.origin + (step + 1) * self.period

    def start(self, origin: float, now: float) -> None:
        self.origin = origin
        self.first_epoch = self.epoch_of(now)

    @property
    def finished(self) -> bool:
        limit = self.max_epochs
        return limit is not None and self.epoch_of(self.clock.now()) >= self.first_epoch + limit
