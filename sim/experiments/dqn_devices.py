"""FG-DQN on every device at hand: the same runs on the CPU and on CUDA, compared.

    python -m sim.experiments dqn-devices [--slots 2000] [--devices cpu,cuda] [--seeds 0,1,2]

The policy's network and its training steps run on ``DQNConfig.device`` ('auto': CUDA when
torch sees a GPU); its random draws (initialisation, the gradient noise, exploration, the
minibatches) come from its own generators on the CPU, so a device changes only the
arithmetic. For each of the ICC 2021 examples (one page per group, and groups of (5, 80, 10,
5) pages) and each device, two runs with the same seed say whether a device repeats itself
decision for decision; the first runs of two devices, how far they agree (the slot of the
first different decision: float sums in another order move the argmax of two close
Q-values, after which the trajectories part); the mean reward per slot (over ``--seeds``)
and the time per slot. Then a checkpoint taken half-way on each device (``global_state``,
numpy arrays only, as the state store keeps it) is loaded on every device and the crawl
goes on: on the same device the rest must be the uninterrupted run's to the decision.

The CI machine has no GPU: ``tests/core/test_dqn.py`` covers the CPU; this script checks the
CUDA path (docs/experiments.md).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

SCENARIOS = ("icc2021-single", "icc2021-groups")


def _policy(scenario, device: str, seed: int):
    from scrapy_whittle.core.policies.dqn import DQNPolicy

    return DQNPolicy(scenario.problem.without_parameters(), rng=seed, device=device)


def _crawl(policy, env, start: int, slots: int) -> tuple[list[list[int]], np.ndarray]:
    decisions, rewards = [], []
    for t in range(start, start + slots):
        ids = policy.select(t, 1.0)
        obs, reward, *_ = env.step(ids)
        policy.observe(obs)
        decisions.append(ids.tolist())
        rewards.append(reward)
    return decisions, np.asarray(rewards, dtype=np.float64)


def _env(name: str):
    from sim.web.scenarios import make_scenario

    scenario = make_scenario(name)
    env = scenario.make_env()
    env.reset(seed=123)
    return scenario, env


def _first_difference(a: list, b: list) -> int | None:
    for t, (x, y) in enumerate(zip(a, b, strict=True)):
        if x != y:
            return t
    return None


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def one_run(name: str, device: str, slots: int, seed: int) -> dict[str, Any]:
    scenario, env = _env(name)
    policy = _policy(scenario, device, seed)
    t = time.perf_counter()
    decisions, rewards = _crawl(policy, env, 0, slots)
    _sync(device)
    return {"decisions": decisions, "reward_per_slot": float(rewards.mean()),
            "ms_per_slot": 1e3 * (time.perf_counter() - t) / slots,
            "device": str(policy.device), "updates": policy.updates}


def resumed(name: str, saved_on: str, loaded_on: str, slots: int, seed: int
            ) -> tuple[list[list[int]], int]:
    """Decisions of slots ``slots // 2`` .. ``slots - 1`` after a checkpoint taken on
    ``saved_on`` half-way and loaded into a fresh policy on ``loaded_on`` (the simulated web
    goes on from where it was), and the gradient steps taken before the checkpoint (0: the
    network saved is the initial one, and only the replay memory and the generator are
    tested)."""
    scenario, env = _env(name)
    first = _policy(scenario, saved_on, seed)
    half = slots // 2
    _crawl(first, env, 0, half)
    state = first.global_state()
    second = _policy(scenario, loaded_on, seed + 1)   # another seed: all of it must come back
    second.load_global_state(state)
    return _crawl(second, env, half, slots - half)[0], first.updates


def dqn_devices(devices: list[str], slots: int, seeds: tuple[int, ...] = (0,)
                ) -> dict[str, Any]:
    """The comparison of the module docstring; repeats and checkpoints with ``seeds[0]``,
    the rewards with every seed (a run of 2,000 slots either learns the good policy or
    stays near a poor one for long, whichever the device: one seed says little)."""
    import torch

    seed = seeds[0]
    report: dict[str, Any] = {"torch": torch.__version__, "slots": slots, "seeds": list(seeds),
                              "gpu": torch.cuda.get_device_name(0)
                              if torch.cuda.is_available() else None, "scenarios": {}}
    for name in SCENARIOS:
        runs = {d: [one_run(name, d, slots, seed) for _ in range(2)] for d in devices}
        out: dict[str, Any] = {}
        for d, (a, b) in runs.items():
            rewards = [a["reward_per_slot"]] + [one_run(name, d, slots, s)["reward_per_slot"]
                                                for s in seeds[1:]]
            out[d] = {"device": a["device"], "reward_per_slot": float(np.mean(rewards)),
                      "rewards_by_seed": [round(r, 4) for r in rewards],
                      "ms_per_slot": min(a["ms_per_slot"], b["ms_per_slot"]),
                      "updates": a["updates"],
                      "repeats_itself": a["decisions"] == b["decisions"],
                      "first_difference_between_repeats":
                          _first_difference(a["decisions"], b["decisions"])}
        base = devices[0]
        for d in devices[1:]:
            out[f"{base}_vs_{d}"] = {"first_difference": _first_difference(
                runs[base][0]["decisions"], runs[d][0]["decisions"])}
        half = slots // 2
        for saved in devices:
            for loaded in devices:
                rest, updates = resumed(name, saved, loaded, slots, seed)
                out[f"checkpoint_{saved}_to_{loaded}"] = {
                    "updates_before": updates,
                    "first_difference_from_uninterrupted_" + saved:
                        _first_difference(rest, runs[saved][0]["decisions"][half:])}
        report["scenarios"][name] = out
    return report


def print_report(report: dict[str, Any]) -> None:
    print(f"torch {report['torch']}, GPU: {report['gpu']}, {report['slots']} slots a run, "
          f"seeds {report['seeds']}")
    for name, out in report["scenarios"].items():
        print(f"== {name}")
        for key, row in out.items():
            print(f"  {key}: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else
                                          f"{k} {v}" for k, v in row.items()))
