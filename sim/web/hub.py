"""A WebSub hub as the simulated web's sources see it: which sources push, and how the hub
delivers (``sim.web.push_web`` runs it; ``python -m sim.bench push`` benchmarks it).

Every quantity is in the scenario's time unit (the hour on the news scenarios). A source that
pushes hands each new entry to the hub when it publishes it; the hub

* loses it with probability ``loss`` (the entry is found by a poll, or never);
* delivers it after a delay: ``"exponential"`` with mean ``delay_mean`` cut at ``delay_max``
  (most deliveries within seconds, a few late: what hubs measured in the field show), or
  ``"uniform"`` on [0, ``delay_max``];
* delivers it a second time, later, with probability ``duplicate`` (a push of an entry the
  subscriber knows);
* sends ``spurious`` pushes per unit of time and pushing source that bring nothing new;
* from ``down_at`` on (None: never) delivers nothing that is published after it, and sends
  nothing (a hub gone silent; what it had accepted before is still delivered).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

DELAYS = ("exponential", "uniform")


@dataclass(frozen=True)
class HubModel:
    """How a hub delivers (see the module docstring); ``share``: the share of the sources
    that push through it (drawn by ``pushers``)."""

    share: float = 0.5
    loss: float = 0.1
    delay: str = "exponential"
    delay_mean: float = 30.0 / 3600
    delay_max: float = 300.0 / 3600
    duplicate: float = 0.0
    spurious: float = 0.0
    down_at: float | None = None

    def __post_init__(self) -> None:
        for name in ("share", "loss", "duplicate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"hub {name} ({value!r}) must lie in [0, 1]")
        if self.delay not in DELAYS:
            raise ValueError(f"hub delay ({self.delay!r}) must be one of {', '.join(DELAYS)}")
        if not (math.isfinite(self.delay_max) and self.delay_max >= 0):
            raise ValueError(f"hub delay_max ({self.delay_max!r}) must be finite and >= 0")
        if not (math.isfinite(self.delay_mean) and self.delay_mean > 0):
            raise ValueError(f"hub delay_mean ({self.delay_mean!r}) must be finite and > 0")
        if not (math.isfinite(self.spurious) and self.spurious >= 0):
            raise ValueError(f"hub spurious ({self.spurious!r}) must be finite and >= 0")
        if self.down_at is not None and not math.isfinite(self.down_at):
            raise ValueError(f"hub down_at ({self.down_at!r}) must be finite or None")

    @property
    def down(self) -> float:
        """The time the hub goes down (inf: never)."""
        return math.inf if self.down_at is None else float(self.down_at)

    def pushers(self, n: int, seed: int = 0) -> np.ndarray:
        """bool[n]: which sources push, ``round(share n)`` of them drawn with ``seed``."""
        rng = np.random.default_rng(np.random.SeedSequence([seed, 28]))
        out = np.zeros(n, dtype=bool)
        out[rng.choice(n, size=round(self.share * n), replace=False)] = True
        return out

    def delays(self, rng: np.random.Generator, k: int) -> np.ndarray:
        """``k`` delivery delays."""
        if self.delay == "uniform":
            return rng.uniform(0.0, self.delay_max, k)
        # exponential cut at delay_max: inverse CDF of the truncated law, no rejection loop
        cap = -math.expm1(-self.delay_max / self.delay_mean)
        return -self.delay_mean * np.log1p(-rng.uniform(0.0, cap, k))
