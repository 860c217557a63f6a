"""What a user of the crawler measures: how late the news comes, what is lost, what it costs.

Collected over one run of a policy on a stochastic simulator (``sim.web.ephemeral``,
``sim.web.diurnal``) or a trace's replay (``sim.web.trace``), from the observations and
``info["missed_items"]``, then settled with the simulator's ``outstanding()`` at the end.
Every measure is about the items published since the start of the run (the simulator's
``time_origin``: time 0, a trace's start); a warm web's stock, published before, counts in
the reward only.

* discovery delay of a captured item: capture time minus publication time (the scenario's
  time unit): mean, median and 90th percentile over the run's captured items;
* items missed: gone before any crawl captured them (pushed out of a feed's window, or past
  the lifetime), found so by a crawl or still to be found at the end of the run; as a count and
  as a share of the items published (captured + missed + still waiting at the end);
* crawls per captured item: crawls made / items captured.

The mean dynamics (deterministic mode) have no items: no measures there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scrapy_whittle.core.observation import Observation


class UserMeasures:
    """The users' measures of one run (``add`` every epoch, ``settle`` at the end)."""

    def __init__(self) -> None:
        self._delays: list[np.ndarray] = []
        self.crawls = 0
        self.captured = 0
        self.missed = 0
        self.waiting = 0           # published since the start, neither captured nor gone
        self.items = True          # False once an observation carries no items
        self.origin = 0.0          # the run's start (``begin``)

    def begin(self, env) -> None:
        """The run on ``env`` starts (after its reset): its items count from its
        ``time_origin`` on."""
        self.origin = float(env.time_origin)

    def add(self, obs: Observation, info: dict[str, Any]) -> None:
        self.crawls += int(obs.ok.sum())
        if obs.item_offsets is None:
            self.items = False
            return
        pub = obs.item_published
        when = np.repeat(obs.time, np.diff(obs.item_offsets))
        fresh = pub >= self.origin
        self._delays.append((when - pub)[fresh])
        self.captured += int(fresh.sum())
        self.missed += int(info.get("missed_items", 0))

    def settle(self, env) -> None:
        """Count what is still out there at the end of the run (the simulator's
        ``outstanding()``: items already gone become missed, the rest waiting)."""
        if not self.items:
            return
        out = env.outstanding()
        self.missed += out["missed"]
        self.waiting += out["published"] - out["missed"]

    def summary(self, minutes_per_unit: float | None = None) -> dict[str, float] | None:
        """The measures as a dict (None without items); ``minutes_per_unit`` adds the delays
        in minutes."""
        if not self.items:
            return None
        delays = np.concatenate(self._delays) if self._delays else np.zeros(0)
        if delays.size:
            mean = float(delays.mean())
            median, p90 = (float(q) for q in np.quantile(delays, [0.5, 0.9]))
        else:
            mean = median = p90 = float("nan")
        published = self.captured + self.missed + self.waiting
        out = {
            "delay_mean": mean, "delay_median": median, "delay_p90": p90,
            "items_published": float(published),
            "items_captured": float(self.captured),
            "items_missed": float(self.missed),
            "missed_share": self.missed / published if published else float("nan"),
            "crawls_per_item": self.crawls / self.captured if self.captured else float("inf"),
        }
        if minutes_per_unit is not None:
            for key in ("mean", "median", "p90"):
                out[f"delay_{key}_minutes"] = out[f"delay_{key}"] * minutes_per_unit
        return out


def mean_summaries(summaries: list[dict[str, float] | None]) -> dict[str, float] | None:
    """The seeds' summaries averaged key by key (None when any has no items)."""
    if not summaries or any(s is None for s in summaries):
        return None
    return {key: float(np.mean([s[key] for s in summaries])) for key in summaries[0]}
