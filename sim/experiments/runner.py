"""Running a policy on a scenario and summarising the rewards (numpy only, no plotting)."""

from __future__ import annotations

import numpy as np

from scrapy_whittle.core.policies import make_policy, policy_class
from sim.web.scenarios import Scenario

# Student t quantiles t_{0.975, df} for 95% confidence bands over few runs
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
         9: 2.262, 10: 2.228, 15: 2.131, 20: 2.086, 30: 2.042}


def t975(df: int) -> float:
    if df <= 0:
        return float("nan")
    keys = [k for k in sorted(_T975) if k <= df]
    return _T975[keys[-1]] if df <= 30 else 1.96


def available(name: str) -> str | None:
    """None when policy ``name`` can be built here, else the reason it cannot."""
    try:
        policy_class(name)
    except ValueError as exc:
        return str(exc)
    return None


def run_policy(scenario: Scenario, name: str, seed: int, iterations: int,
               **options) -> np.ndarray:
    """Rewards of policy ``name`` in each of ``iterations`` epochs of one seeded run.

    Oracle policies (``needs_parameters``) get the scenario's true problem, learners the
    problem without parameters. The run's SeedSequence is split into one stream for the
    environment and one for the policy, so every policy of a run sees the same world.
    """
    env_seq, pol_seq = np.random.SeedSequence([seed, 2021]).spawn(2)
    problem = scenario.problem
    if not policy_class(name).needs_parameters:
        problem = problem.without_parameters()
    policy = make_policy(name, problem, rng=np.random.default_rng(pol_seq), **options)
    env = scenario.make_env()
    env.reset(seed=int(env_seq.generate_state(1)[0]))
    rewards = np.zeros(iterations)
    for t in range(iterations):
        ids = policy.select(t, scenario.budget)
        obs, reward, terminated, truncated, _ = env.step(ids)
        policy.observe(obs)
        rewards[t] = reward
        if terminated or truncated:
            break
    return rewards


def running_average(r: np.ndarray) -> np.ndarray:
    """Per run (last axis = time): mean reward of epochs 0..t."""
    return np.cumsum(r, axis=-1) / np.arange(1, r.shape[-1] + 1)


def moving_average(r: np.ndarray, window: int = 200) -> np.ndarray:
    """Per run: mean reward of the last ``window`` epochs (fewer at the start)."""
    c = np.cumsum(r, axis=-1)
    out = c.copy()
    out[..., window:] = c[..., window:] - c[..., :-window]
    n = np.minimum(np.arange(1, r.shape[-1] + 1), window)
    return out / n


def band(curves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean over runs (axis 0) and the half-width of its 95% confidence interval."""
    runs = curves.shape[0]
    mean = curves.mean(axis=0)
    if runs < 2:
        return mean, np.zeros_like(mean)
    return mean, t975(runs - 1) * curves.std(axis=0, ddof=1) / np.sqrt(runs)


def summarise(rewards: np.ndarray, window: int = 200, span: tuple[int, int] = (1000, 10000)
              ) -> dict[str, float]:
    """The figures reported for one policy: rewards has shape (runs, iterations)."""
    ra_mean, ra_ci = band(running_average(rewards))
    ma_mean, ma_ci = band(moving_average(rewards, window))
    lo, hi = span
    hi = min(hi, rewards.shape[1])
    lo = min(lo, hi // 10)          # short runs: skip the first tenth instead
    per_run = rewards[:, lo:hi].mean(axis=1)
    s_mean, s_ci = band(per_run[:, None])
    return {
        "runs": int(rewards.shape[0]), "iterations": int(rewards.shape[1]),
        "running_average_final": float(ra_mean[-1]), "running_average_ci95": float(ra_ci[-1]),
        "moving_average_final": float(ma_mean[-1]), "moving_average_ci95": float(ma_ci[-1]),
        "span": [int(lo), int(hi)],
        "span_mean": float(s_mean[0]), "span_ci95": float(s_ci[0]),
    }
