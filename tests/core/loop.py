"""The crawl loop the policy tests share: decide, step the simulator, observe."""

from __future__ import annotations

import numpy as np


def run(policy, env, steps: int, budget: float = 1.0, start: int = 0):
    """Epochs ``start`` .. ``start + steps - 1``; returns (decisions as lists, rewards)."""
    decisions, rewards = [], []
    for t in range(start, start + steps):
        ids = policy.select(t, budget)
        obs, reward, *_ = env.step(ids)
        policy.observe(obs)
        decisions.append(ids.tolist())
        rewards.append(reward)
    return decisions, np.array(rewards)
