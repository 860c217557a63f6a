"""Push as a noisy signal: the learned Whittle policy on a news mix where some sources push
through a WebSub hub (``sim.web.hub``, ``sim.web.push_web``), against the same crawl without push.

    python -m sim.bench push --n 10000 --budget 2% --horizon 720 --seeds 2
    python -m sim.bench push --loss 0.1 --delay uniform --json

Per seed, on ``news-mix`` (stochastic, warm start; N sources, ``--budget`` crawls an epoch of
one hour), with the same sources pushing (``--share`` of them, drawn once per seed) in every
run:

* ``no-push``: no hub; the policy polls every source (the reference);
* ``push``: the hub delivers (``--loss``, ``--delay`` law with ``--delay-mean-s`` cut at
  ``--delay-max-s``, ``--duplicate``, ``--spurious``), the policy learns from the pushes
  (``observe_push``);
* ``push-blind``: the same hub, a policy told nothing of it (what pushes give by themselves);
* ``hub-down``: as ``push``, but the hub delivers nothing published after ``--down-at``
  (default: the middle of the measured epochs);
* ``hub-down-blind`` (only when ``--runs`` names it): the same fall under a policy told
  nothing of the pushes (what the silent-hub rule is for).

Measured over the epochs after the warm-up (``--warmup``, default a third of the horizon):
utility per epoch (what polls and pushes captured), and its ratio to ``no-push``'s; the
pushing sources' polls, as a share of theirs in ``no-push``; the median and 90th percentile
of the discovery delay (seconds from publication to capture by poll or push) of the pushing
sources' items published in those epochs; the policy's decision time per epoch (select,
observe, observe_push). For ``hub-down``, over the epochs after the hub went down: the
utility per epoch against ``no-push``'s over the same epochs, the pushing sources' polls
against ``no-push``'s over the second half of them (polling back), and, per pushing source
that ``no-push`` polled at least twice in the measured epochs (its usual interval I =
measured epochs / its polls there) and with 2 I left after the fall, whether its first poll
after the fall came within 2 I (the share of those that did, and the median of that wait
over I).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from scrapy_whittle.core.policies import make_policy
from sim.bench import harness
from sim.bench.policies import budget_arg, budget_of
from sim.web.hub import DELAYS, HubModel
from sim.web.push_web import PushWeb
from sim.web.scenarios import make_scenario

SECONDS = 3600.0          # news-mix's time unit is the hour
RUNS = ("no-push", "push", "push-blind", "hub-down")
#: runs made only when asked for (``--runs``)
EXTRA_RUNS = ("hub-down-blind",)
VALUES = ("base", "capture")


def run_crawl(params, budget: float, hub: HubModel | None, pushing: np.ndarray, seed: int,
              horizon: int, warmup: int, learn_push: bool = True,
              down: float | None = None, values: str = "base",
              adjust: Callable[[Any], None] | None = None) -> dict[str, Any]:
    """One run of the learned Whittle policy: rewards per epoch, polls per source (in the
    measured epochs, and in the second half of the epochs after time ``down``), the first
    poll after ``down``, the pushing sources' discovery delays, decision time. (``down`` only
    marks the time: the hub given is the one that goes down, or not.) ``values``: what the
    policy is told of each entry's value: ``"base"`` its base value (the model's own
    observations), ``"capture"`` only the capture's total at its age, as a crawl is (a feed
    tells no base value: ``RecrawlService`` observes none). ``adjust(policy)``, when given,
    is called on the policy before the first epoch (an experiment's change of it)."""
    if values not in VALUES:
        raise ValueError(f"values ({values!r}) must be one of {', '.join(VALUES)}")
    blind = values == "capture"
    env = PushWeb(params, budget, hub, pushing=pushing, start="warm")
    env.reset(seed=seed)
    problem = env.problem.without_parameters()
    policy = make_policy("whittle", problem,
                         rng=np.random.default_rng(np.random.SeedSequence([seed, 1])))
    if adjust is not None:
        adjust(policy)
    n, period = env.n, params.period
    rewards = np.zeros(horizon)
    polls = np.zeros(n, dtype=np.int64)
    late = np.zeros(n, dtype=np.int64)             # polls in the second half after the fall
    first_after = np.full(n, np.inf)
    delays: list[np.ndarray] = []
    d_epoch = np.inf if down is None else down / period
    late_from = d_epoch + (horizon - d_epoch) / 2
    decision = 0.0
    clock = time.perf_counter
    for t in range(horizon):
        t0 = clock()
        action = policy.select(t, budget)
        t1 = clock()
        obs, reward, _, _, info = env.step(action)
        pushes = info["pushes"]
        t2 = clock()
        told, told_pushes = ((replace(obs, item_value=None), replace(pushes, item_value=None))
                             if blind else (obs, pushes))
        policy.observe(told)
        if learn_push:
            policy.observe_push(told_pushes)
        decision += (t1 - t0) + (clock() - t2)
        rewards[t] = reward
        if t >= warmup:
            polls[action] += 1
            if t >= late_from:
                late[action] += 1
            start = warmup * period
            own = pushing[np.repeat(obs.sources, np.diff(obs.item_offsets))]
            keep = own & (obs.item_published >= start)
            delays.append(obs.time[0] - obs.item_published[keep] if obs.sources.size
                          else np.zeros(0))
            new = pushes.new_items > 0
            if new.any():
                src, when = pushes.sources[new], pushes.time[new]
                keep = pushing[src] & (pushes.item_published >= start)
                delays.append(when[keep] - pushes.item_published[keep])
        if t >= d_epoch:
            first_after[action] = np.minimum(first_after[action], t * period)
    return {"rewards": rewards, "polls": polls, "late_polls": late,
            "first_after": first_after, "decision_ms": 1e3 * decision / horizon,
            "delays": np.concatenate(delays) if delays else np.zeros(0)}


def evaluate(n: int = 10_000, budget: float | str = "2%", horizon: int = 720,
             warmup: int | None = None, seeds: int = 2, hub: HubModel | None = None,
             down_at: float | None = None, runs: tuple[str, ...] = RUNS,
             values: str = "base") -> dict[str, Any]:
    """Every run of ``runs`` on every seed; the result object ``--json`` prints."""
    if horizon < 2 or seeds < 1:
        raise ValueError("horizon must be >= 2 and seeds >= 1")
    warmup = horizon // 3 if warmup is None else int(warmup)
    if not 0 <= warmup < horizon - 1:
        raise ValueError(f"warmup ({warmup!r}) must lie in [0, horizon - 1)")
    hub = HubModel() if hub is None else hub
    scenario = make_scenario("news-mix", n=n, stochastic=True)
    params = scenario.params
    m = budget_of(budget, n) if isinstance(budget, str) else float(budget)
    period = params.period
    down = (warmup + (horizon - warmup) // 2) * period if down_at is None else float(down_at)
    measured = horizon - warmup
    out: dict[str, Any] = {"n": n, "budget": m, "horizon": horizon, "warmup": warmup,
                           "seeds": seeds, "values": values,
                           "hub": {**hub.__dict__, "down_at": down},
                           "runs": {}}
    per_run: dict[str, list[dict[str, Any]]] = {name: [] for name in runs}
    pushers = []
    for seed in range(seeds):
        pushing = hub.pushers(n, seed)
        pushers.append(pushing)
        for name in runs:
            kw: dict[str, Any] = {}
            if name == "no-push":
                kw["hub"] = None
            elif name == "push":
                kw["hub"] = hub
            elif name == "push-blind":
                kw["hub"], kw["learn_push"] = hub, False
            elif name == "hub-down":
                kw["hub"] = replace(hub, down_at=down)
            else:
                kw["hub"], kw["learn_push"] = replace(hub, down_at=down), False
            per_run[name].append(run_crawl(params, m, pushing=pushing, seed=seed,
                                           horizon=horizon, warmup=warmup, down=down,
                                           values=values, **kw))
    ref = per_run.get("no-push")
    for name, results in per_run.items():
        utility = [float(r["rewards"][warmup:].mean()) for r in results]
        row: dict[str, Any] = {
            "utility_per_epoch": float(np.mean(utility)),
            "pusher_polls_per_epoch": float(np.mean(
                [r["polls"][p].sum() / measured for r, p in zip(results, pushers, strict=True)])),
            "other_polls_per_epoch": float(np.mean(
                [r["polls"][~p].sum() / measured for r, p in zip(results, pushers, strict=True)])),
            "delay_median_s": float(np.mean([np.median(r["delays"]) * SECONDS
                                             for r in results])),
            "delay_p90_s": float(np.mean([np.quantile(r["delays"], 0.9) * SECONDS
                                          for r in results])),
            "decision_ms": float(np.mean([r["decision_ms"] for r in results])),
        }
        if ref is not None:
            base = [float(r["rewards"][warmup:].mean()) for r in ref]
            row["utility_vs_no_push"] = float(np.mean(utility) / np.mean(base))
            row["pusher_polls_vs_no_push"] = float(
                sum(r["polls"][p].sum() for r, p in zip(results, pushers, strict=True))
                / max(1, sum(r["polls"][p].sum() for r, p in zip(ref, pushers, strict=True))))
        if name.startswith("hub-down") and ref is not None:
            row["after_down"] = fall_measures(results, ref, pushers, down, warmup, horizon,
                                              period)
        out["runs"][name] = row
    return out


def fall_measures(results, ref, pushers, down: float, warmup: int, horizon: int,
                  period: float) -> dict[str, float]:
    """What ``hub-down`` runs show after the fall, against the ``no-push`` runs."""
    d = int(np.ceil(down / period))
    util = np.mean([r["rewards"][d:].mean() for r in results])
    base = np.mean([r["rewards"][d:].mean() for r in ref])
    late = sum(r["late_polls"][p].sum() for r, p in zip(results, pushers, strict=True))
    late_ref = sum(r["late_polls"][p].sum() for r, p in zip(ref, pushers, strict=True))
    measured = horizon - warmup
    within, waits, judged = 0, [], 0
    for r, b, p in zip(results, ref, pushers, strict=True):
        usual = np.where(b["polls"] >= 2, measured * period / np.maximum(b["polls"], 1), np.inf)
        ok = p & np.isfinite(usual) & (down + 2 * usual <= horizon * period)
        wait = r["first_after"][ok] - down
        judged += int(ok.sum())
        within += int(np.sum(wait <= 2 * usual[ok]))
        waits.append(wait / usual[ok])
    w = np.concatenate(waits) if waits else np.zeros(0)
    return {"utility_vs_no_push": float(util / base),
            "utility_lost_share": float(1 - util / base),
            "pusher_polls_second_half_vs_no_push": float(late / max(1, late_ref)),
            "judged_sources": judged,
            "polled_within_two_intervals": within / judged if judged else float("nan"),
            "wait_over_interval_median": float(np.median(w)) if w.size else float("nan")}


def format_results(report: dict[str, Any]) -> str:
    hub = report["hub"]
    lines = [f"news-mix N = {report['n']}, budget {report['budget']:g}/epoch, horizon "
             f"{report['horizon']} (measured after {report['warmup']}), {report['seeds']} "
             f"seed(s), values told: {report['values']}; hub: {hub['share']:.0%} of sources "
             f"push, loss {hub['loss']:g}, "
             f"delay {hub['delay']} ("
             + (f"mean {hub['delay_mean'] * SECONDS:g} s, " if hub["delay"] == "exponential"
                else "")
             + f"max {hub['delay_max'] * SECONDS:g} s), duplicates {hub['duplicate']:g}, spurious "
             f"{hub['spurious']:g}/h; hub-down at t = {hub['down_at']:g}",
             f"{'run':<16}{'utility/ep':>12}{'vs no-push':>11}{'pusher polls':>14}"
             f"{'vs no-push':>11}{'other polls':>12}{'delay med s':>12}{'p90 s':>10}"
             f"{'decide ms':>10}"]
    for name, r in report["runs"].items():
        lines.append(f"{name:<16}{r['utility_per_epoch']:>12.1f}"
                     f"{r.get('utility_vs_no_push', float('nan')):>11.4f}"
                     f"{r['pusher_polls_per_epoch']:>14.2f}"
                     f"{r.get('pusher_polls_vs_no_push', float('nan')):>11.3f}"
                     f"{r['other_polls_per_epoch']:>12.2f}{r['delay_median_s']:>12.1f}"
                     f"{r['delay_p90_s']:>10.0f}{r['decision_ms']:>10.2f}")
    for name, r in report["runs"].items():
        fall = r.get("after_down")
        if not fall:
            continue
        lines += ["", f"{name}: after the hub went down: utility "
                      f"{fall['utility_vs_no_push']:.4f} of no-push's (lost "
                      f"{fall['utility_lost_share']:+.2%}); pushers' polls in "
                      f"the second half {fall['pusher_polls_second_half_vs_no_push']:.3f} of "
                      f"no-push's; first poll within 2 usual intervals: "
                      f"{fall['polled_within_two_intervals']:.1%} of "
                      f"{fall['judged_sources']} sources (median wait "
                      f"{fall['wait_over_interval_median']:.2f} intervals)"]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = harness.parser("push", __doc__)
    parser.add_argument("--n", type=int, default=10_000, help="sources (news-mix)")
    parser.add_argument("--budget", type=budget_arg, default="2%",
                        help="crawls per epoch, a number or a share of the sources")
    parser.add_argument("--horizon", type=int, default=720, help="epochs (hours) per run")
    parser.add_argument("--warmup", type=int, default=None, help="epochs left out")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--share", type=float, default=0.5, help="share of sources that push")
    parser.add_argument("--loss", type=float, default=0.1, help="deliveries lost")
    parser.add_argument("--delay", choices=DELAYS, default="exponential")
    parser.add_argument("--delay-mean-s", type=float, default=30.0)
    parser.add_argument("--delay-max-s", type=float, default=300.0)
    parser.add_argument("--duplicate", type=float, default=0.0)
    parser.add_argument("--spurious", type=float, default=0.0,
                        help="spurious pushes per hour and pushing source")
    parser.add_argument("--down-at", type=float, default=None,
                        help="hour the hub goes down in the hub-down run (default: the middle "
                        "of the measured epochs)")
    parser.add_argument("--runs", default=",".join(RUNS))
    parser.add_argument("--values", choices=VALUES, default="base",
                        help="what the policy is told of an entry's value: its base value, "
                        "or only the capture's total at its age, as a crawl is")
    parser.add_argument("--json", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runs = tuple(r.strip() for r in args.runs.split(",") if r.strip())
    try:
        unknown = sorted(set(runs) - set(RUNS) - set(EXTRA_RUNS))
        if unknown:
            raise ValueError(f"unknown runs {unknown}; known: {', '.join(RUNS + EXTRA_RUNS)}")
        hub = HubModel(share=args.share, loss=args.loss, delay=args.delay,
                       delay_mean=args.delay_mean_s / SECONDS,
                       delay_max=args.delay_max_s / SECONDS, duplicate=args.duplicate,
                       spurious=args.spurious)
        report = evaluate(n=args.n, budget=args.budget, horizon=args.horizon,
                          warmup=args.warmup, seeds=args.seeds, hub=hub,
                          down_at=args.down_at, runs=runs, values=args.values)
    except ValueError as exc:
        print(f"sim.bench.push: error: {exc}", file=sys.stderr)
        return 2
    harness.emit(report, args.json, format_results)
    return 0
