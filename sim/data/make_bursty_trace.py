"""Write ``bursty_feeds.csv``: a small example trace for ``sim.web.trace.TraceReplay``.

Six feeds over 14 days (time unit: one hour), each a Markov-modulated Poisson process: it
alternates between a quiet and a bursty regime with exponentially distributed durations and
publishes as a Poisson process of the regime's rate; base utilities are log-normal. The
arrivals are therefore bursty, not Poisson: the counts in an hour are over-dispersed.

    python -m sim.data.make_bursty_trace          # rewrites sim/data/bursty_feeds.csv
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

HOURS = 24 * 14
# name: (quiet rate /h, burst rate /h, mean quiet duration h, mean burst duration h, utility median)
FEEDS = {
    "agency-wire": (2.0, 12.0, 10.0, 2.0, 1.0),
    "city-desk": (0.3, 4.0, 20.0, 3.0, 2.0),
    "sports-live": (0.05, 20.0, 40.0, 2.5, 0.5),
    "tech-blog": (0.05, 1.0, 48.0, 6.0, 3.0),
    "weather-alerts": (0.0, 6.0, 60.0, 4.0, 1.5),
    "weekly-column": (0.01, 0.5, 150.0, 8.0, 5.0),
}


def generate(seed: int = 2024) -> list[tuple[str, float, float]]:
    rng = np.random.default_rng(seed)
    rows = []
    for name, (quiet, burst, d_quiet, d_burst, median) in FEEDS.items():
        t, bursting = 0.0, False
        while t < HOURS:
            length = rng.exponential(d_burst if bursting else d_quiet)
            end = min(t + length, HOURS)
            count = rng.poisson((burst if bursting else quiet) * (end - t))
            for when in np.sort(rng.uniform(t, end, count)):
                rows.append((name, float(when), float(median * rng.lognormal(0.0, 0.8))))
            t, bursting = end, not bursting
    rows.sort(key=lambda r: r[1])
    return rows


def main() -> None:
    path = Path(__file__).with_name("bursty_feeds.csv")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("source,timestamp,utility\n")
        for name, when, util in generate():
            fh.write(f"{name},{when:.4f},{util:.4f}\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
