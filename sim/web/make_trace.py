"""Write a trace of the ``news-diurnal`` sources (CSV in the trace format of
``scrapy_whittle.report.trace``)::

    python -m sim.web.make_trace --n 50 --days 14 --out trace.csv [--weekend] [--seed 0]

The time unit is the hour, 0 = Monday 00:00 UTC; ``sim.web.trace.TraceReplay`` replays it.
"""

from __future__ import annotations

import argparse
import sys

from scrapy_whittle.report.trace import write_trace
from sim.web.diurnal import diurnal_trace
from sim.web.scenarios import make_scenario


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.web.make_trace",
                                 description="write a trace of news-diurnal sources (CSV)")
    ap.add_argument("--n", type=int, default=50, help="number of sources")
    ap.add_argument("--days", type=float, default=14.0, help="length of the trace in days")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--weekend", action="store_true", help="add weekend factors")
    ap.add_argument("--out", required=True, help="CSV file to write")
    args = ap.parse_args(argv)
    try:
        scn = make_scenario("news-diurnal", n=args.n, seed=args.seed, weekend=args.weekend)
        trace = diurnal_trace(scn.params, scn.profile, 24.0 * args.days, seed=args.seed)
    except ValueError as exc:
        print(f"sim.web.make_trace: error: {exc}", file=sys.stderr)
        return 2
    write_trace(trace, args.out)
    print(f"{trace.time.shape[0]} items of {len(trace.names)} sources over {args.days:g} days "
          f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
