"""What knowing the daily rhythm is worth, as a function of interest half-life and of the
day/night ratio: ``python -m sim.experiments.diurnal --out docs/figures``.

Two sweeps on the ``news-diurnal`` population (same publishing rates, item values and time
zones), stochastic arrivals, budget 1% per hour:

* half-life: every source's interest half-life set to h (hours), its rhythm as drawn;
* day/night ratio: every source's ratio max p / min p set to R (R = 1: no rhythm), its
  half-life as drawn (log-normal, median 6 h).

At each point the rhythm-aware policies run against their rhythm-blind counterparts on the
same arrivals (same seeds): ``diurnal-whittle`` against ``whittle`` (both learning,
reward over the epochs after a warm-up of one simulated week) and ``diurnal-oracle`` against
the oracle ``whittle`` (which knows each source's daily mean). Writes
``diurnal_gain.png`` and ``diurnal_gain.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

from scrapy_whittle.core.problem import SourceParams
from sim.bench.policies import mean_ci95, run_policy
from sim.web.profiles import DiurnalProfile
from sim.web.scenarios import Scenario, make_scenario

PAIRS = (("diurnal-whittle", "whittle"), ("diurnal-oracle", "oracle"))
HALF_LIVES = (0.5, 1.0, 2.0, 4.0, 8.0, 24.0, 72.0)
RATIOS = (1.0, 1.5, 2.0, 4.0, 8.0, 16.0)


def with_half_life(scn: Scenario, hours: float) -> Scenario:
    p = scn.params
    return replace(scn, params=SourceParams(p.rate, p.mean_utility,
                                            np.full(p.n, math.log(2.0) / hours), p.period))


def with_ratio(scn: Scenario, ratio: float) -> Scenario:
    prof = scn.profile
    q_max = float(prof.shape.max())
    amplitude = np.full(prof.n, (ratio - 1.0) / (ratio - 1.0 + q_max))
    return replace(scn, profile=DiurnalProfile(prof.day, prof.shape, amplitude, prof.shift,
                                               prof.weekend))


def _point(args) -> tuple[str, float, str, int, float]:
    sweep, value, policy, seed, n, horizon, warmup = args
    # the steady-state gain of a rhythm, from the empty start its committed figure was drawn on
    scn = make_scenario("news-diurnal", n=n, stochastic=True, start="empty")
    scn = with_half_life(scn, value) if sweep == "half_life" else with_ratio(scn, value)
    rewards, _ = run_policy(scn, policy, horizon, seed)
    return sweep, value, policy, seed, float(rewards[warmup:].mean())


def sweep(n: int, horizon: int, warmup: int, seeds: int, jobs: int) -> dict:
    tasks = [(s, v, p, seed, n, horizon, warmup)
             for s, values in (("half_life", HALF_LIVES), ("ratio", RATIOS))
             for v in values for pair in PAIRS for p in pair for seed in range(seeds)]
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as pool:
            results = list(pool.map(_point, tasks))
    else:
        results = [_point(t) for t in tasks]
    reward = {(s, v, p, seed): r for s, v, p, seed, r in results}
    out: dict = {"n": n, "horizon": horizon, "warmup": warmup, "seeds": seeds,
                 "half_life": [], "ratio": []}
    for s, values in (("half_life", HALF_LIVES), ("ratio", RATIOS)):
        for v in values:
            row: dict = {"value": v}
            for aware, blind in PAIRS:
                gains = [reward[s, v, aware, k] / reward[s, v, blind, k] - 1.0
                         for k in range(seeds)]
                g, ci = mean_ci95(gains)
                row[f"{aware}_vs_{blind}"] = {"gain": g, "ci95": ci}
            out[s].append(row)
    return out


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, label in ((axes[0], "half_life", "interest half-life (hours)"),
                           (axes[1], "ratio", "day/night ratio of every source")):
        rows = report[key]
        x = [r["value"] for r in rows]
        for (aware, blind), style in zip(PAIRS, ("o-", "s--"), strict=True):
            name = f"{aware}_vs_{blind}"
            y = np.array([100 * r[name]["gain"] for r in rows])
            ci = np.array([100 * r[name]["ci95"] for r in rows])
            ax.errorbar(x, y, yerr=ci, fmt=style, capsize=3, label=f"{aware} vs {blind}")
        ax.axhline(0.0, color="grey", lw=0.8)
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("reward gain (%)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"news-diurnal, N = {report['n']}, budget 1%/h, stochastic; reward over "
                 f"epochs {report['warmup']}-{report['horizon']}, {report['seeds']} seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.experiments.diurnal",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--horizon", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=168, help="one simulated week")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    report = sweep(args.n, args.horizon, args.warmup, args.seeds, args.jobs)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "diurnal_gain.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(report, args.out / "diurnal_gain.png")
    for key in ("half_life", "ratio"):
        for r in report[key]:
            cells = "  ".join(f"{name}: {100 * v['gain']:+.2f}% ± {100 * v['ci95']:.2f}"
                              for name, v in r.items() if name != "value")
            print(f"{key} = {r['value']:g}: {cells}")
    print(f"done in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
