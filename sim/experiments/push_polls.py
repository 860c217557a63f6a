"""How much utility polling the pushing sources less than the index chooses would cost.

    python -m sim.experiments.push_polls [--n 10000] [--budget 2%] [--horizon 720] [--seeds 2]
        [--scales 1,0.7,0.5,0.25]

``sim.bench.push``'s ``no-push`` and ``push`` runs (news-mix, half the sources pushing
through a hub that loses 10% of the deliveries), where in the ``push`` runs the learned
policy counts, for every pushing source, the share 1 - c (1 - p) of its arrivals as delivered
instead of its learned share p: c = 1 is the policy as it is; c < 1 prices every poll of a
pushing source at c times the arrivals the pushes miss, so they are polled less than the index
finds worth. Printed per c, mean over the seeds: the captured utility against ``no-push``'s
(measured epochs) and the pushing sources' polls against ``no-push``'s, the questions of
issue 28's target (the pushing sources polled at least 90% less).
"""

from __future__ import annotations

import argparse
import sys
from types import MethodType

import numpy as np

from sim.bench.policies import budget_arg, budget_of
from sim.bench.push import run_crawl
from sim.web.hub import HubModel
from sim.web.scenarios import make_scenario


def scaled_trust(c: float):
    """``run_crawl``'s ``adjust``: the policy counts 1 - c (1 - p) where it learned p."""
    def adjust(policy) -> None:
        learned = policy.push.share_at

        def share_at(self, ids):
            return 1.0 - c * (1.0 - learned(ids))

        policy.push.share_at = MethodType(share_at, policy.push)
    return adjust


def sweep(n: int, budget, horizon: int, seeds: int, scales: list[float]) -> dict:
    params = make_scenario("news-mix", n=n, stochastic=True).params
    m = budget_of(budget, n) if isinstance(budget, str) else float(budget)
    warmup = horizon // 3
    hub = HubModel()
    out: dict[float, list[tuple[float, float]]] = {c: [] for c in scales}
    for seed in range(seeds):
        pushing = hub.pushers(n, seed)
        kw = {"pushing": pushing, "seed": seed, "horizon": horizon, "warmup": warmup}
        ref = run_crawl(params, m, hub=None, **kw)
        base = ref["rewards"][warmup:].mean()
        for c in scales:
            r = run_crawl(params, m, hub=hub, adjust=scaled_trust(c), **kw)
            out[c].append((r["rewards"][warmup:].mean() / base,
                           r["polls"][pushing].sum() / max(1, ref["polls"][pushing].sum())))
    return {c: tuple(np.mean(rows, axis=0)) for c, rows in out.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.experiments.push_polls",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--budget", type=budget_arg, default="2%")
    ap.add_argument("--horizon", type=int, default=720)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--scales", default="1,0.7,0.5,0.25")
    args = ap.parse_args(argv)
    scales = [float(c) for c in args.scales.split(",") if c.strip()]
    if not scales or any(not 0 < c <= 1 for c in scales):
        ap.error(f"--scales ({args.scales!r}) must be numbers in (0, 1]")
    result = sweep(args.n, args.budget, args.horizon, args.seeds, scales)
    print(f"{'c':>5}{'utility vs no-push':>20}{'pusher polls vs no-push':>25}{'fewer polls':>13}")
    for c, (util, polls) in result.items():
        print(f"{c:>5g}{util:>20.4f}{polls:>25.3f}{1 - polls:>13.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
