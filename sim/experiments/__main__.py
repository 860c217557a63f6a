"""Command line of the experiments:
``python -m sim.experiments {icc2021,allerton2019,dqn-timing,dqn-devices}``.

Each experiment runs every policy ``--runs`` times for ``--iterations`` epochs on the same
seeded worlds (run r uses seed r for the environment and a separate stream for the policy),
writes one PNG per curve type (running average; moving average over 200 epochs, as in the
2021 paper's figures; mean over runs with a 95% Student-t band) and merges its figures into
``OUT/results.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from sim.experiments.runner import (
    available,
    band,
    moving_average,
    run_policy,
    running_average,
    summarise,
)
from sim.web.scenarios import make_scenario

EXPERIMENTS = {
    "icc2021": {
        "scenarios": ["icc2021-single", "icc2021-groups"],
        "policies": ["uniform", "static", "thompson", "dqn", "whittle", "oracle"],
    },
    "allerton2019": {
        "scenarios": ["allerton2019"],
        "policies": ["oracle", "lspe", "whittle", "thompson-whittle"],
    },
}


def _task(args: tuple[str, str, int, int]) -> tuple[str, str, int, np.ndarray, float]:
    scenario, policy, seed, iterations = args
    try:  # one torch thread per worker: the workers already use the cores
        import torch
    except ImportError:
        torch = None
    threads = torch.get_num_threads() if torch is not None else 0
    if torch is not None:
        torch.set_num_threads(1)
    t = time.perf_counter()
    try:
        rewards = run_policy(make_scenario(scenario), policy, seed, iterations)
    finally:  # in-process runs (--jobs 1) leave the caller's setting alone
        if torch is not None:
            torch.set_num_threads(threads)
    return scenario, policy, seed, rewards, time.perf_counter() - t


def _plot(curves: dict[str, np.ndarray], title: str, ylabel: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, c in curves.items():
        mean, ci = band(c)
        x = np.arange(1, mean.shape[0] + 1)
        style = "--" if name == "oracle" else "-"
        ax.plot(x, mean, style, label=name, lw=1.2)
        ax.fill_between(x, mean - ci, mean + ci, alpha=0.2)
    ax.set_xlabel("iteration (slot / epoch)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_experiment(name: str, out: Path, runs: int, iterations: int, jobs: int,
                   policies: list[str] | None = None) -> dict:
    spec = EXPERIMENTS[name]
    chosen = []
    for p in policies or spec["policies"]:
        reason = available(p)
        if reason is None:
            chosen.append(p)
        else:
            print(f"skipping policy {p!r}: {reason}", file=sys.stderr)
    tasks = [(s, p, r, iterations) for s in spec["scenarios"] for p in chosen
             for r in range(runs)]
    rewards: dict[tuple[str, str], np.ndarray] = {}
    seconds: dict[tuple[str, str], float] = {}
    for s in spec["scenarios"]:
        for p in chosen:
            rewards[s, p] = np.zeros((runs, iterations))
            seconds[s, p] = 0.0
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as pool:
            results = list(pool.map(_task, tasks))
    else:
        results = [_task(t) for t in tasks]
    for s, p, r, rew, sec in results:
        rewards[s, p][r] = rew
        seconds[s, p] += sec
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {"runs": runs, "iterations": iterations, "scenarios": {}}
    for s in spec["scenarios"]:
        summary = {p: summarise(rewards[s, p]) | {"seconds_per_run": seconds[s, p] / runs}
                   for p in chosen}
        if "oracle" in summary:
            ref = summary["oracle"]["span_mean"]
            for p in chosen:
                summary[p]["span_ratio_to_oracle"] = (summary[p]["span_mean"] / ref
                                                       if ref > 0 else None)
        report["scenarios"][s] = summary
        curves = {p: rewards[s, p] for p in chosen}
        _plot({p: running_average(c) for p, c in curves.items()},
              f"{s}: running average ({runs} runs, 95% band)", "average reward",
              out / f"{s}_running.png")
        _plot({p: moving_average(c, 200) for p, c in curves.items()},
              f"{s}: moving average over 200 iterations ({runs} runs, 95% band)",
              "average reward", out / f"{s}_moving.png")
    path = out / "results.json"
    merged = json.loads(path.read_text()) if path.exists() else {}
    merged[name] = report
    path.write_text(json.dumps(merged, indent=2, sort_keys=True) + "\n")
    return report


def dqn_timing(arms: int, batch: int, repeats: int, threads: int, device: str = "cpu"
               ) -> dict[str, float]:
    """Milliseconds of one FG-DQN training step (minibatch ``batch``) and one decision with
    ``arms`` arms and the paper's network (4000 and 8 hidden units), on ``device`` (CUDA's
    work is waited for before each clock reading)."""
    import torch

    from scrapy_whittle.core.policies.dqn import DQNPolicy
    from scrapy_whittle.core.problem import Problem

    torch.set_num_threads(threads)
    policy = DQNPolicy(Problem(n=arms), rng=0, device=device)
    sync = torch.cuda.synchronize if policy.device.type == "cuda" else (lambda: None)
    rng = np.random.default_rng(0)
    n = 4 * batch
    policy.buf_s[:n] = rng.random((n, 2 * arms))
    policy.buf_s2[:n] = rng.random((n, 2 * arms))
    policy.buf_a[:n] = rng.integers(0, arms, n)
    policy.buf_r[:n] = rng.random(n)
    policy.buf_len = n

    def per_call(f) -> float:
        for _ in range(3):
            f()
        times = []
        for _ in range(repeats):
            sync()
            t = time.perf_counter()
            f()
            sync()
            times.append(time.perf_counter() - t)
        return 1e3 * float(np.median(times))

    idx = rng.integers(0, n, batch)
    return {"arms": arms, "batch": batch, "threads": threads, "device": str(policy.device),
            "train_step_ms": per_call(lambda: policy.train_step(idx)),
            "decision_ms": per_call(lambda: policy.select(0, 1.0)),
            "parameters": sum(p.numel() for p in policy.q.parameters())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.experiments", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, paper in (("icc2021", "Deep Reinforcement Learning for Web Crawling, ICC 2021"),
                        ("allerton2019", "A learning algorithm for the Whittle index policy "
                                         "for scheduling web crawlers, Allerton 2019")):
        p = sub.add_parser(name, help=f"the examples of {paper}")
        p.add_argument("--out", type=Path, required=True, help="folder for PNGs and results.json")
        p.add_argument("--runs", type=int, default=10, help="independent runs (paper: 10)")
        p.add_argument("--iterations", type=int, default=10_000,
                       help="epochs per run (default 10,000)")
        p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                       help="worker processes")
        p.add_argument("--policies", default=None,
                       help="comma-separated subset of the experiment's policies")
    t = sub.add_parser("dqn-timing", help="ms of one FG-DQN training step and one decision")
    t.add_argument("--arms", type=int, default=100)
    t.add_argument("--batch", type=int, default=64)
    t.add_argument("--repeats", type=int, default=30)
    t.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    t.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    d = sub.add_parser("dqn-devices", help="FG-DQN on the CPU and on CUDA: the same runs, "
                                           "compared (repeatability, checkpoints, speed)")
    d.add_argument("--slots", type=int, default=2000)
    d.add_argument("--devices", default="cpu,cuda")
    d.add_argument("--threads", type=int, default=1, help="torch threads on the CPU")
    d.add_argument("--seeds", default="0", help="comma-separated seeds of the reward runs")
    d.add_argument("--json", type=Path, default=None, help="also write the report here")
    args = parser.parse_args(argv)
    if args.command == "dqn-devices":
        import torch

        from sim.experiments.dqn_devices import dqn_devices, print_report

        torch.set_num_threads(args.threads)
        report = dqn_devices([x.strip() for x in args.devices.split(",") if x.strip()],
                             args.slots, tuple(int(x) for x in args.seeds.split(",")))
        print_report(report)
        if args.json is not None:
            args.json.write_text(json.dumps(report, indent=2) + "\n")
        return 0
    if args.command == "dqn-timing":
        res = dqn_timing(args.arms, args.batch, args.repeats, args.threads, args.device)
        print(f"FG-DQN on {res['device']}, {res['arms']} arms, {res['parameters']} parameters, "
              f"{res['threads']} torch thread(s): training step on a minibatch of "
              f"{res['batch']}: {res['train_step_ms']:.2f} ms; one decision: "
              f"{res['decision_ms']:.3f} ms (medians of {args.repeats})")
        return 0
    for value, flag in ((args.runs, "--runs"), (args.iterations, "--iterations")):
        if value < 1:
            parser.error(f"{flag} ({value!r}) must be >= 1")
    policies = args.policies.split(",") if args.policies else None
    t0 = time.perf_counter()
    report = run_experiment(args.command, args.out, args.runs, args.iterations, args.jobs,
                            policies)
    for s, summary in report["scenarios"].items():
        print(f"{s} ({args.runs} runs x {args.iterations} iterations)")
        for p, f in summary.items():
            ratio = f.get("span_ratio_to_oracle")
            ratio_txt = f"  {100 * ratio:5.1f}% of oracle" if ratio is not None else ""
            print(f"  {p:18s} running avg {f['running_average_final']:8.3f} "
                  f"± {f['running_average_ci95']:.3f}   epochs {f['span'][0]}-{f['span'][1]}: "
                  f"{f['span_mean']:8.3f} ± {f['span_ci95']:.3f}{ratio_txt}")
    print(f"done in {time.perf_counter() - t0:.0f} s; figures and results.json in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
