"""Benchmarks: crawl policies on the simulated web, against the Lagrangian upper bound.

    python -m sim.bench --scenario news-mix --policy whittle,round_robin,nutch --horizon 1000
    python -m sim.bench --scenario tcns2018 --budget 2 --policy oracle --json
    python -m sim.bench --perf --n 1000000
    python -m sim.bench --trace crawl.csv.gz --budget 2% --half-life 6 --policy whittle,nutch

For each policy and seed the simulator is reset with that seed and the policy is run for
``--horizon`` epochs from the scenario's initial state (empty sources unless the scenario says
otherwise). The news scenarios and a trace have a clock (their time unit the hour): an epoch
is ``--step`` minutes, by default one, the re-crawl service's resolution, and ``--budget``
counts crawls per hour, spent step / 60 of it per epoch (``sim.web.scenarios.at_step``); the
policies decide every epoch at fractional epochs of one hour, so that the rules keep their
intervals in hours. ``--horizon``, ``--warmup`` and the learning curve count epochs: minutes at
``--step 1``, hours at ``--step 60``, the news scenarios' epochs before the clock existed (the
figures per epoch, rewards and bounds, depend on the step). The papers' scenarios count time
in their own epochs and reject ``--step``. Reported per policy:

* ``reward``: mean reward per epoch over the epochs after the warm-up (``--warmup``, default a
  quarter of the horizon), averaged over seeds, with ``ci95`` the half-width of the 95%
  Student-t interval over seeds (0 with one seed, or when every seed gives the same value);
* ``reward_from_empty``: the same mean over all epochs, warm-up included. The two differ by the
  transient from X(0) = 0: on ``tcns2018`` M = 1 the Whittle policy's long-run average is 260.39
  while the first 61 epochs from empty sources average 254.66 (the figure the 2018 paper prints);
* ``upper_bound``: ``scrapy_whittle.upper_bound`` for the scenario's true (alpha, u), costs and
  budget, which bounds the long-run average reward of every policy; ``ratio`` = reward / bound;
  on a scenario with daily rhythms (``news-diurnal``) the periodic bound
  (``scrapy_whittle.core.periodic_bound``, one price per hour of the day), not computed
  (NaN) at epochs shorter than an hour;
* ``decision_ms``: wall time per epoch of the policy's decision, ``select`` plus ``observe``
  (the simulator's own time excluded), averaged over all epochs and seeds;
* ``measures`` (stochastic runs; None for the mean dynamics): the users' measures of
  ``sim.bench.measures`` (discovery delay of captured items, mean / median / 90th percentile, in the
  scenario's time unit and, on the news scenarios, in minutes; items missed, as a count and a
  share of the items published since the start; crawls per captured item), averaged over
  seeds;
* ``curve`` (with ``--curve``): the learning curve, the mean reward over the first 24, 48, 120
  and 480 epochs (those within the horizon), as a share of the bound and of the first-look
  oracle's mean over the same epochs and seeds (``sim.bench.first_look``, run automatically).

A budget that is not whole (``--volume-of`` gives a rule's mean crawls per epoch, 0.8 say)
is spent through a credit (``sim.web.credit``): an epoch may spend the whole part of the budget
unspent so far, so that the spend averages the budget; a whole budget is spent every epoch.

``--start warm|empty`` overrides the scenario's start (``sim.web.scenarios``: warm for the news
scenarios, empty for the papers'); ``reward_from_empty`` is then the mean from that start.
``first-look`` is the first-look oracle (``sim.bench.first_look``): the oracle that knows a source's
parameters only once it has crawled it.

Policies that learn (``needs_parameters`` false) are built with ``problem.without_parameters()``;
oracle policies (oracle, greedy, static) with the full problem. On ``news-diurnal`` the
stationary oracles know the daily mean of each source's arrivals (they are rhythm-blind);
``diurnal-oracle`` knows u_i per hour of the day, and ``diurnal-whittle`` is told the day's
length (24 time units).

``--trace FILE`` replays a recorded trace (``scrapy_whittle.report.trace``: CSV, gzip when FILE
ends in ``.gz``; ``scrapy whittle trace`` writes one from a crawl) instead of a scenario, its
time unit the hour and an epoch ``--step`` minutes (default one, the crawler's resolution):
``--budget`` crawls per hour (a number, or a share of the trace's sources such as ``2%``;
default 1%), spent through the credit below, ``--half-life`` hours of readers' interest
(default 6), ``--window`` entries a feed shows (default all; also for the stochastic
scenarios); the horizon is capped at the epochs the trace spans. The oracle policies and the
bound get the parameters fitted to the trace (``TraceReplay.fitted_params``: its rates and mean
values, the half-life given), which are estimates, not the process that made it.

``--perf`` measures at N sources (``--n``, default 1,000,000; ``news-mix``, budget 1%): the
oracle Whittle policy's decision time, the simulator's speed in source-epochs per second (N
times the epochs advanced, per second of ``env.step``; deterministic, and stochastic in its
steady state after one round-robin round, where the cost is per item drawn), and the bytes per
source held by the policy and the environment (numpy arrays reachable from them, each buffer
counted once; Python object overheads are not counted).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import replace
from typing import Any

import numpy as np

from scrapy_whittle.core.bound import upper_bound
from scrapy_whittle.core.periodic import PeriodicArrivals
from scrapy_whittle.core.periodic_bound import periodic_upper_bound
from scrapy_whittle.core.policies import make_policy, policy_class
from scrapy_whittle.report.trace import read_trace
from sim.bench import listing
from sim.bench.first_look import NAME as FIRST_LOOK
from sim.bench.first_look import FirstLookOracle
from sim.bench.harness import emit
from sim.bench.measures import UserMeasures, mean_summaries
from sim.web.credit import BudgetCredit
from sim.web.hosts import HANDLINGS, HostGate, costed
from sim.web.scenarios import NEWS_SCENARIOS, SCENARIOS, Scenario, make_scenario
from sim.web.trace import TraceReplay

#: the learning curve's horizons (epochs from the start)
CURVE_EPOCHS = (24, 48, 120, 480)
#: the epoch in minutes (``--step``) of a trace and of the news scenarios: the product's
#: resolution
STEP_MINUTES = 1.0
#: what a policy is told of item values (``--values``)
VALUES = ("base", "capture")

# 97.5% quantiles of Student's t for 1..30 degrees of freedom
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(df: int) -> float:
    """97.5% quantile of Student's t with ``df`` degrees of freedom (Cornish-Fisher beyond 30)."""
    if df < 1:
        return math.nan
    if df <= 30:
        return _T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def mean_ci95(values) -> tuple[float, float]:
    """Mean and half-width of the 95% t-interval of the mean."""
    x = np.asarray(values, dtype=np.float64)
    if x.size < 2:
        return float(x.mean()), 0.0
    return float(x.mean()), float(t975(x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))


def rhythm_options(name: str, scenario: Scenario, problem) -> dict[str, Any]:
    """What the rhythm-aware policies are told: ``diurnal-oracle`` the arrivals per phase of
    the day (one phase, i.e. the stationary model, on a scenario without rhythm) and whether
    the web is warm,
    ``diurnal-whittle`` the length of the day when the scenario's time unit has one."""
    if name == "diurnal-oracle":
        periodic = scenario.periodic
        if periodic is not None and scenario.resolution != 1.0:
            # its table is per epoch of the simulator, the policies' epochs are hours
            raise ValueError("diurnal-oracle follows the rhythm epoch by epoch: run it with "
                             "--step 60")
        if periodic is None:
            periodic = PeriodicArrivals(problem.alpha, problem.u[:, None])
        return {"periodic": periodic, "warm": scenario.options.get("start") == "warm"}
    if name == "diurnal-whittle" and scenario.day is not None:
        return {"day": scenario.day}
    return {}


def window_options(name: str, scenario: Scenario) -> dict[str, Any]:
    """What the oracle is told of the feeds' windows on a scenario that has one: the window
    and each source's true rate (the window-aware oracle)."""
    window = scenario.options.get("window")
    if name != "oracle" or window is None:
        return {}
    return {"window": float(window), "rate": scenario.params.rate}


def scenario_bound(scenario: Scenario) -> float:
    """The upper bound the ratios are taken against: the periodic bound with a rhythm."""
    if scenario.kind == "diurnal" and scenario.resolution != 1.0:
        # one price per epoch of the day: 1,440 at a minute's epochs, beyond what the
        # periodic bound's policy iteration solves in a benchmark's time
        return math.nan
    problem = scenario.problem
    periodic = scenario.periodic
    if periodic is not None:
        return periodic_upper_bound(periodic, scenario.budget, problem.cost).value
    if scenario.hosts is not None:      # the bound under each host's allowance too
        return upper_bound(problem.alpha, problem.u, scenario.budget, problem.cost,
                           host=scenario.hosts, allowance=scenario.host_limits).value
    return upper_bound(problem.alpha, problem.u, scenario.budget, problem.cost).value


def check_policy_name(name: str) -> None:
    """ValueError for a name neither the core nor ``sim`` (``first-look``) knows."""
    if name != FIRST_LOOK:
        policy_class(name)


def build_policy(name: str, scenario: Scenario, seed: int, problem=None, **options: Any):
    """The policy ``name`` for ``scenario``: oracle policies get the true parameters."""
    problem = scenario.policy_problem if problem is None else problem
    if name == FIRST_LOOK:
        return FirstLookOracle(problem, rng=np.random.default_rng(
            np.random.SeedSequence([seed, 1])))
    options = {**rhythm_options(name, scenario, problem), **window_options(name, scenario),
               **options}
    if not policy_class(name).takes_max_interval:
        options.pop("max_interval", None)
    if policy_class(name).takes_resolution and scenario.resolution != 1.0:
        options.setdefault("resolution", scenario.resolution)
    if not policy_class(name).needs_parameters:
        problem = problem.without_parameters()
    rng = np.random.default_rng(np.random.SeedSequence([seed, 1]))
    return make_policy(name, problem, rng=rng, **options)


def sweeps(name: str) -> bool:
    """Whether ``name`` takes part in a discovery sweep: the policies that learn a source
    from its crawls (and the first-look oracle); an oracle knows every source already."""
    return name == FIRST_LOOK or not policy_class(name).needs_parameters


def sweep_step(env, action: np.ndarray):
    """Epoch 0 of a discovery sweep: the policy's ``action`` within the budget, and a first
    fetch of every other source outside it (what a feed reader does on subscribe). Returns
    (obs, the reward of ``action``, the sweep's own capture, info)."""
    rest = np.setdiff1d(np.arange(env.n), action)
    budget = env.budget
    env.budget = float(np.sum(env.cost))
    try:
        obs, reward, _, _, info = env.step(np.concatenate([action, rest]))
    finally:
        env.budget = budget
    own = float(np.sum(obs.reward[:action.shape[0]]))
    return obs, own, float(reward) - own, info


def run_policy(scenario: Scenario, name: str, horizon: int, seed: int,
               measures: UserMeasures | None = None, discovery: bool = False,
               hosts: str = "allowance", values: str = "base",
               **options: Any) -> tuple[np.ndarray, float]:
    """Rewards per epoch over ``horizon`` epochs, and the total decision time in seconds;
    ``measures`` collects the users' measures (stochastic simulators). ``discovery``: a
    discovery sweep at epoch 0 (``sweep_step``; for the policies that ``sweeps``), whose own
    capture is left out of the rewards and kept in ``run_policy.last_sweep``. On a scenario
    with hosts, ``hosts`` says how their limits are handled (``sim.web.hosts``), and what the
    hosts saw is kept in ``run_policy.last_hosts``. ``values``: what the policy is told of
    each item's value (``VALUES``): ``"base"`` its base value where the simulator draws one,
    ``"capture"`` only each crawl's captured total at the items' ages, as a crawl is (a feed
    tells no base value)."""
    if values not in VALUES:
        raise ValueError(f"values ({values!r}) must be one of {', '.join(VALUES)}")
    gate = None
    if scenario.hosts is not None:
        if hosts == "costs":
            scenario = costed(scenario)
        gate = HostGate(scenario, hosts)
    env = scenario.make_env()
    env.reset(seed=seed)
    if measures is not None:
        measures.begin(env)
    policy = build_policy(name, scenario, seed, **options)
    credit = BudgetCredit(scenario.budget)
    resolution = scenario.resolution
    rewards = np.empty(horizon)
    decision = 0.0
    clock = time.perf_counter
    discovery = discovery and sweeps(name)
    run_policy.last_sweep = (0.0, 0)
    for t in range(horizon):
        budget = credit.allowance()
        if not credit.whole:
            env.budget = budget
        t0 = clock()
        at = t * resolution if resolution != 1.0 else t     # the policy's epoch
        action = policy.select(at, budget) if gate is None else gate.choose(policy, at, budget)
        t1 = clock()
        credit.spend(env.cost, action)
        if gate is not None:
            action = gate.serve(t, action)
        if discovery and t == 0:
            obs, reward, swept, info = sweep_step(env, action)
            run_policy.last_sweep = (swept, env.n - action.shape[0])
        else:
            obs, reward, _, _, info = env.step(action)
        t2 = clock()
        if resolution != 1.0:
            obs = replace(obs, epoch=at)
        policy.observe(replace(obs, item_value=None) if values == "capture" else obs)
        decision += (t1 - t0) + (clock() - t2)
        rewards[t] = reward
        if measures is not None:
            measures.add(obs, info)
    if measures is not None:
        measures.settle(env)
    run_policy.last_hosts = None if gate is None else gate.summary(horizon)
    return rewards, decision


def minutes_per_unit(scenario: Scenario) -> float | None:
    """60 on the news scenarios and a trace (time unit the hour), None where the unit is
    abstract."""
    return 60.0 if scenario.day == 24.0 else None


def learning_curve(rewards: dict[str, list[np.ndarray]], bound: float,
                   horizon: int) -> dict[str, dict[str, dict[str, float]]]:
    """Per policy and H in ``CURVE_EPOCHS`` (H <= horizon): the mean reward over the first H
    epochs (over seeds), its share of the bound and of the first-look oracle's."""
    reference = rewards[FIRST_LOOK]
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name, runs in rewards.items():
        out[name] = {}
        for h in CURVE_EPOCHS:
            if h > horizon:
                continue
            mean = float(np.mean([r[:h].mean() for r in runs]))
            ref = float(np.mean([r[:h].mean() for r in reference]))
            out[name][str(h)] = {
                "reward": mean,
                "of_bound": mean / bound if bound > 0 else math.nan,
                "of_first_look": mean / ref if ref > 0 else math.nan,
            }
            if "oracle" in rewards:
                full = float(np.mean([r[:h].mean() for r in rewards["oracle"]]))
                out[name][str(h)]["of_oracle"] = mean / full if full > 0 else math.nan
    return out


def evaluate(scenario: Scenario, policies: list[str], horizon: int = 1000, seeds: int = 5,
             warmup: int | None = None, curve: bool = False,
             discovery: bool = False, hosts: tuple[str, ...] = ("allowance",),
             values: str = "base", max_interval: float | None = None) -> dict[str, Any]:
    """Run every policy on ``seeds`` seeds; the result object printed by ``--json``.
    ``curve``: add the learning curve (and run the first-look oracle for it). ``discovery``:
    the learners sweep every source at epoch 0 outside the budget (``run_policy``); per
    policy, ``discovery`` reports the sweep's extra crawls and its own capture (mean over
    seeds), which the rewards leave out. ``hosts``: on a scenario with hosts, each policy
    runs once per way of handling their limits (``sim.web.hosts.HANDLINGS``; the ones other
    than "allowance" named ``policy+handling``), and ``hosts`` reports what the hosts saw
    (summed over seeds). ``values``: what the learners are told of item values
    (``run_policy``). ``max_interval``: the longest a source waits between two crawls, in
    the scenario's unit of time, for the policies that take one (the rules keep theirs)."""
    if horizon < 1 or seeds < 1:
        raise ValueError("horizon and seeds must be >= 1")
    warmup = horizon // 4 if warmup is None else int(warmup)
    if not 0 <= warmup < horizon:
        raise ValueError(f"warmup ({warmup!r}) must lie in [0, horizon)")
    bound = scenario_bound(scenario)
    if curve and FIRST_LOOK not in policies:
        policies = [*policies, FIRST_LOOK]
    stochastic = bool(scenario.options.get("stochastic", scenario.kind == "pages"))
    # the simulators that draw items, and a trace's replay of recorded ones
    has_items = (stochastic and scenario.kind != "pages") or scenario.kind == "trace"
    results, runs = [], {}
    handlings = tuple(hosts) if scenario.hosts is not None else ("allowance",)
    for handling in handlings:
        if handling not in HANDLINGS:
            raise ValueError(f"host handling must be one of {HANDLINGS}, got {handling!r}")
    runs_of = [(name, handling, name if handling == "allowance" else f"{name}+{handling}")
               for handling in handlings for name in policies]
    for name, handling, label in runs_of:
        long_run, from_empty, decision, summaries, swept = [], [], 0.0, [], []
        host_seen = []
        runs[label] = []
        for seed in range(seeds):
            ledger = UserMeasures() if has_items else None
            rewards, seconds = run_policy(scenario, name, horizon, seed, measures=ledger,
                                          discovery=discovery, hosts=handling,
                                          values=values, max_interval=max_interval)
            swept.append(run_policy.last_sweep)
            host_seen.append(run_policy.last_hosts)
            long_run.append(rewards[warmup:].mean())
            from_empty.append(rewards.mean())
            decision += seconds
            runs[label].append(rewards)
            summaries.append(None if ledger is None
                             else ledger.summary(minutes_per_unit(scenario)))
        reward, ci = mean_ci95(long_run)
        results.append({
            "policy": label,
            "reward": reward,
            "ci95": ci,
            "reward_from_empty": float(np.mean(from_empty)),
            "upper_bound": bound,
            "ratio": reward / bound if bound > 0 else math.nan,
            "decision_ms": 1e3 * decision / (horizon * seeds),
            "measures": mean_summaries(summaries),
        })
        if host_seen[0] is not None:
            results[-1]["hosts"] = _sum_hosts(host_seen)
        if discovery and sweeps(name):
            results[-1]["discovery"] = {"crawls": float(np.mean([c for _, c in swept])),
                                        "capture": float(np.mean([v for v, _ in swept]))}
    if curve:
        for r, shares in zip(results, learning_curve(runs, bound, horizon).values(),
                             strict=True):
            r["curve"] = shares
    return {
        "scenario": scenario.name,
        "kind": scenario.kind,
        "start": scenario.start,
        "n": scenario.n,
        "budget": scenario.budget,
        "stochastic": stochastic,
        "horizon": horizon,
        "warmup": warmup,
        "seeds": seeds,
        "values": values,
        "upper_bound": bound,
        "results": results,
    }


def _sum_hosts(seen: list[dict[str, Any]]) -> dict[str, Any]:
    """``HostGate.summary`` of several seeds: counts summed, rates and shares averaged
    (shares weighted by requests)."""
    out: dict[str, Any] = {"over_limit": sum(s["over_limit"] for s in seen),
                           "rejected": sum(s["rejected"] for s in seen)}
    for key in seen[0]:
        if not key.startswith("host"):
            continue
        rows = [s[key] for s in seen]
        after = sum(r["requests_after_first"] for r in rows)
        refused = sum(r["rejected_after_first"] for r in rows)
        out[key] = {
            "rate": rows[0]["rate"],
            "accepted_per_epoch": float(np.mean([r["accepted_per_epoch"] for r in rows])),
            "rejected": sum(r["rejected"] for r in rows),
            "rejected_after_first": refused,
            "requests_after_first": after,
            "rejected_share_after_first": refused / after if after else math.nan,
        }
    return out


# -- a rule's own request volume -------------------------------------------------------------

def rule_volume(scenario: Scenario, rule: str, horizon: int = 1000, seeds: int = 5,
                warmup: int | None = None) -> float:
    """The budget ``rule`` spends by itself: run unconstrained (the budget crawls every source
    each epoch) with its default intervals, on the same seeds as ``evaluate``, its mean crawl
    cost per epoch over the epochs after the warm-up (crawls per epoch with unit costs)."""
    warmup = horizon // 4 if warmup is None else int(warmup)
    if not 0 <= warmup < horizon:
        raise ValueError(f"warmup ({warmup!r}) must lie in [0, horizon)")
    cost = scenario.problem.cost
    free = replace(scenario, budget=float(np.sum(cost)))
    spent = []
    for seed in range(seeds):
        env = free.make_env()
        env.reset(seed=seed)
        policy = build_policy(rule, free, seed)
        for t in range(horizon):
            at = t * free.resolution if free.resolution != 1.0 else t
            action = policy.select(at, free.budget)
            if t >= warmup:
                spent.append(float(np.sum(cost[action])))
            obs, _, _, _, _ = env.step(action)
            policy.observe(replace(obs, epoch=at) if free.resolution != 1.0 else obs)
    return float(np.mean(spent))


# -- performance at scale -------------------------------------------------------------------

def state_bytes(*objects: Any) -> int:
    """Bytes of the numpy buffers reachable from ``objects`` (attributes, dataclass fields,
    containers), each buffer counted once."""
    seen_objects: set[int] = set()
    seen_buffers: set[int] = set()
    total = 0

    def visit(obj: Any, depth: int) -> None:
        nonlocal total
        if depth > 8 or id(obj) in seen_objects or obj is None:
            return
        seen_objects.add(id(obj))
        if isinstance(obj, np.ndarray):
            base = obj
            while isinstance(base.base, np.ndarray):
                base = base.base
            key = base.__array_interface__["data"][0]
            if key not in seen_buffers:
                seen_buffers.add(key)
                total += base.nbytes
            return
        if isinstance(obj, str | bytes | int | float | bool | np.random.Generator | type):
            return
        if isinstance(obj, dict):
            for value in obj.values():
                visit(value, depth + 1)
            return
        if isinstance(obj, list | tuple | set):
            for value in obj:
                visit(value, depth + 1)
            return
        for slot in getattr(type(obj), "__slots__", ()):
            visit(getattr(obj, slot, None), depth + 1)
        for value in getattr(obj, "__dict__", {}).values():
            visit(value, depth + 1)

    for obj in objects:
        visit(obj, 0)
    return total


def perf(n: int = 1_000_000, epochs: int = 20, warm: int | None = None, seed: int = 0,
         budget: float | None = None) -> dict[str, Any]:
    """Decision time of the Whittle policy, simulator speed and state size at N sources.

    The decision is timed in the steady state of a long-running crawl: after ``warm`` epochs
    (default two full rounds, 2 N / M), not in the transient of sources all starting empty.
    """
    scenario = make_scenario("news-mix", n=n, budget=budget, seed=seed, start="empty")
    if warm is None:
        warm = 2 * -(-n // max(1, int(scenario.budget)))
    env = scenario.make_env()
    env.reset(seed=seed)
    policy = build_policy("oracle", scenario, seed, problem=env.problem)
    clock = time.perf_counter
    decide, sim = [], 0.0
    for t in range(warm + epochs):
        t0 = clock()
        action = policy.select(t, scenario.budget)
        t1 = clock()
        obs, _, _, _, _ = env.step(action)
        t2 = clock()
        policy.observe(obs)
        t3 = clock()
        if t >= warm:
            decide.append((t1 - t0) + (t3 - t2))
            sim += t2 - t1
    nbytes = state_bytes(policy, env)
    # the stochastic simulator, driven by round-robin actions of the same size, measured after
    # one full round (every source then waits N / k epochs between crawls: the steady state)
    stoch = make_scenario("news-mix", n=n, budget=budget, seed=seed, stochastic=True,
                          start="empty").make_env()
    stoch.reset(seed=seed)
    k = int(scenario.budget)
    rounds = -(-n // k)
    sim_s, items = 0.0, 0
    for t in range(rounds + epochs):
        action = (t * k + np.arange(k)) % n
        t0 = clock()
        obs, _, _, _, _ = stoch.step(action)
        if t >= rounds:
            sim_s += clock() - t0
            items += int(obs.item_offsets[-1])
    decide_ms = 1e3 * np.asarray(decide)
    return {
        "n": n,
        "budget": scenario.budget,
        "epochs": epochs,
        "warm_epochs": warm,
        "oracle_decision_ms": float(decide_ms.mean()),
        "oracle_decision_ms_median": float(np.median(decide_ms)),
        "oracle_decision_ms_max": float(decide_ms.max()),
        "sim_source_epochs_per_s": n * epochs / sim,
        "sim_stochastic_source_epochs_per_s": n * epochs / sim_s,
        "sim_stochastic_items_per_s": items / sim_s,
        "state_bytes_per_source": nbytes / n,
    }


# -- a recorded trace instead of a scenario (--trace) ---------------------------------------

def budget_arg(text: str) -> float | str:
    """``--budget``: a number of crawls per epoch, or a share of the sources (``"2%"``)."""
    share = text.strip().endswith("%")
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a number nor a share such as "
                                         "2%") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return text.strip() if share else value


def budget_of(budget: float | str | None, n: int) -> float | None:
    """A ``budget_arg`` for ``n`` sources: a share is max(1, round(share x n)) crawls."""
    if not isinstance(budget, str):
        return budget
    return max(1.0, round(float(budget[:-1]) / 100 * n))


def scenario_budget(args: argparse.Namespace) -> float | None:
    """``--budget`` for the scenario: a share resolved against its number of sources (a
    scenario that cannot be built leaves it to the error ``make_scenario`` gives then)."""
    if not isinstance(args.budget, str):
        return args.budget
    try:
        return budget_of(args.budget, make_scenario(args.scenario, n=args.n).n)
    except ValueError:
        return None


def trace_scenario(path: str, *, budget: float | str | None = None, half_life: float = 6.0,
                   window: int | None = None, step: float = STEP_MINUTES) -> Scenario:
    """The scenario of the trace in ``path`` (time unit the hour, an epoch ``step`` minutes):
    the replay, with the parameters fitted to it (``--trace``, see the module docstring)."""
    if not (math.isfinite(half_life) and half_life > 0):
        raise ValueError(f"--half-life ({half_life!r}) must be > 0 hours")
    if not (math.isfinite(step) and step > 0):
        raise ValueError(f"--step ({step!r}) must be > 0 minutes")
    trace = read_trace(path)
    decay = math.log(2) / half_life
    params = TraceReplay(trace, budget=1.0, decay=decay, period=step / 60.0).fitted_params()
    n = len(trace.names)
    budget = budget_of(budget, n)
    per_hour = max(1.0, round(0.01 * n)) if budget is None else budget
    return Scenario(name=f"trace {path}", kind="trace", budget=per_hour * step / 60.0,
                    resolution=min(1.0, step / 60.0),
                    params=params, trace=trace,
                    options={} if window is None else {"window": window},
                    description=f"{trace.time.shape[0]} items of {n} sources replayed")


def trace_epochs(scenario: Scenario) -> int:
    """Epochs until every item of the scenario's trace has been published."""
    time = scenario.trace.time
    return math.floor((time.max() - time.min()) / scenario.params.period) + 2


def build_scenario(args: argparse.Namespace) -> tuple[Scenario, int]:
    """The scenario the command line names, a named one or a recorded ``--trace``, and the
    horizon to run it for (a trace's is capped at the epochs it spans)."""
    if args.trace is not None:
        scenario = trace_scenario(args.trace, budget=args.budget, half_life=args.half_life,
                                  window=args.window,
                                  step=STEP_MINUTES if args.step is None else args.step)
        return scenario, min(args.horizon, trace_epochs(scenario))
    step = args.step
    if step is None and args.scenario in NEWS_SCENARIOS:
        step = STEP_MINUTES
    options = {} if args.window is None else {"window": args.window}
    if args.rate_limit is not None:
        options["rate_limit"] = args.rate_limit
    if args.retry_after:
        options["retry_after"] = True
    scenario = make_scenario(args.scenario, budget=scenario_budget(args), n=args.n,
                             stochastic=True if args.stochastic else None, start=args.start,
                             step=step, **options)
    return scenario, args.horizon


# -- command line ---------------------------------------------------------------------------

def _arrivals(report: dict[str, Any]) -> str:
    """How the run's items arrive: recorded (a trace), drawn (stochastic) or the mean model."""
    if report.get("kind") == "trace":
        return "recorded arrivals"
    return "stochastic" if report["stochastic"] else "deterministic"


def format_results(report: dict[str, Any]) -> str:
    head = (f"scenario {report['scenario']}: N = {report['n']}, budget {report['budget']:g}, "
            f"{_arrivals(report)}, "
            f"horizon {report['horizon']} (warm-up {report['warmup']}), "
            f"{report['seeds']} seed(s)"
            + ("" if report.get("values", "base") == "base"
               else f", values told: {report['values']}")
            + f"; upper bound {report['upper_bound']:.4f}")
    lines = [head, f"{'policy':<18}{'reward/epoch':>24}{'from empty':>12}{'ratio':>9}"
                   f"{'decision ms':>13}"]
    for r in report["results"]:
        reward = f"{r['reward']:.4f} ± {r['ci95']:.4f}"
        lines.append(f"{r['policy']:<18}{reward:>24}{r['reward_from_empty']:>12.4f}"
                     f"{r['ratio']:>9.4f}{r['decision_ms']:>13.3f}")
    return "\n".join(lines + format_hosts(report) + format_measures(report)
                     + format_curve(report))


def format_hosts(report: dict[str, Any]) -> list[str]:
    """What the hosts saw (a scenario with hosts), empty without them."""
    rows = [r for r in report["results"] if r.get("hosts")]
    if not rows:
        return []
    lines = ["", "hosts (summed over seeds): crawls beyond an allowance, 429s; per "
                 "rate-limiting host: accepted/epoch, 429s after its first / requests"]
    for r in rows:
        h = r["hosts"]
        cells = "".join(f"  {k}: rate {v['rate']:g}, {v['accepted_per_epoch']:.3f}/epoch, "
                        f"{v['rejected_after_first']}/{v['requests_after_first']}"
                        for k, v in h.items() if k.startswith("host"))
        lines.append(f"{r['policy']:<18}{h['over_limit']:>6}{h['rejected']:>6}{cells}")
    return lines


def format_measures(report: dict[str, Any]) -> list[str]:
    """The users' measures table (stochastic runs), empty without them."""
    rows = [r for r in report["results"] if r.get("measures")]
    if not rows:
        return []
    minutes = "delay_mean_minutes" in rows[0]["measures"]
    unit = "min" if minutes else "units"
    lines = ["", f"users' measures (items published since the start; delays in {unit})",
             f"{'policy':<18}{'delay mean':>11}{'median':>9}{'p90':>9}{'missed':>10}"
             f"{'share':>8}{'crawls/item':>13}"]
    for r in rows:
        m = r["measures"]
        sfx = "_minutes" if minutes else ""
        lines.append(f"{r['policy']:<18}{m['delay_mean' + sfx]:>11.1f}"
                     f"{m['delay_median' + sfx]:>9.1f}{m['delay_p90' + sfx]:>9.1f}"
                     f"{m['items_missed']:>10.0f}{m['missed_share']:>8.3f}"
                     f"{m['crawls_per_item']:>13.3f}")
    return lines


def format_curve(report: dict[str, Any]) -> list[str]:
    """The learning-curve table (``--curve``), empty without it."""
    rows = [r for r in report["results"] if r.get("curve")]
    if not rows:
        return []
    hs = list(rows[0]["curve"])
    full = "of_oracle" in rows[0]["curve"][hs[0]]
    width = 24 if full else 16
    lines = ["", "learning curve: mean reward over the first H epochs, share of the bound "
                 "/ of the first-look oracle" + (" / of the oracle" if full else ""),
             f"{'policy':<18}" + "".join(f"{'H=' + h:>{width}}" for h in hs)]
    for r in rows:
        cells = "".join(f"{c['of_bound']:>8.3f}{c['of_first_look']:>8.3f}"
                        + (f"{c['of_oracle']:>8.3f}" if full else "")
                        for c in r["curve"].values())
        lines.append(f"{r['policy']:<18}{cells}")
    swept = [r for r in report["results"] if r.get("discovery")]
    if swept:
        lines += ["", "discovery sweep at epoch 0 (outside the budget, left out above): "
                      "extra crawls, capture"]
        lines += [f"{r['policy']:<18}{r['discovery']['crawls']:>8.0f}"
                  f"{r['discovery']['capture']:>14.1f}" for r in swept]
    return lines


def format_perf(report: dict[str, Any]) -> str:
    return "\n".join([
        f"N = {report['n']:,}, budget {report['budget']:g}, {report['epochs']} epochs measured",
        f"oracle decision (select + observe) after {report['warm_epochs']} warm-up "
        f"epochs: median {report['oracle_decision_ms_median']:.1f} ms/epoch, mean "
        f"{report['oracle_decision_ms']:.1f}, max {report['oracle_decision_ms_max']:.1f}",
        f"simulator, deterministic: {report['sim_source_epochs_per_s'] / 1e6:,.0f} M "
        "source-epochs/s",
        f"simulator, stochastic:    {report['sim_stochastic_source_epochs_per_s'] / 1e6:,.1f} M "
        f"source-epochs/s ({report['sim_stochastic_items_per_s'] / 1e6:,.1f} M items/s, "
        "steady state)",
        f"policy + environment state: {report['state_bytes_per_source']:.1f} bytes/source",
    ])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m sim.bench", description=__doc__.split("\n")[0],
        usage="%(prog)s [NAME] [options]",
        epilog="with NAME, benchmark NAME instead (python -m sim.bench NAME --help):\n"
        + listing(), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default="tcns2018", choices=SCENARIOS)
    parser.add_argument("--policy", default="oracle,greedy,round_robin,uniform",
                        help="comma-separated policy names")
    parser.add_argument("--budget", type=budget_arg, default=None,
                        help="crawl budget per epoch (per hour with --trace and the news "
                        "scenarios): a number, or a share of the sources (2%%)")
    parser.add_argument("--trace", default=None, metavar="FILE",
                        help="replay this recorded trace (scrapy_whittle.report.trace's CSV, "
                        ".gz accepted) instead of a scenario")
    parser.add_argument("--half-life", type=float, default=6.0, metavar="HOURS",
                        help="with --trace: half-life of readers' interest (default 6)")
    parser.add_argument("--step", type=float, default=None, metavar="MINUTES",
                        help="with --trace and the news scenarios: the epoch's length in "
                        f"minutes (default {STEP_MINUTES:g}, the crawler's resolution; 60: "
                        "hourly epochs); --horizon and --warmup count epochs")
    parser.add_argument("--window", type=int, default=None, metavar="N",
                        help="entries a feed shows, older new ones are missed (stochastic "
                        "simulators and --trace; default all)")
    parser.add_argument("--horizon", type=int, default=1000,
                        help="epochs per run (minutes at --step 1)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="epochs left out of the reward average (default horizon / 4); "
                        "with --perf, epochs before timing starts (default 2 N / M)")
    parser.add_argument("--seeds", type=int, default=5, help="number of seeds (0, 1, ...)")
    parser.add_argument("--n", type=int, default=None, help="number of sources (news-mix)")
    parser.add_argument("--stochastic", action="store_true", help="stochastic arrivals")
    parser.add_argument("--start", choices=("warm", "empty"), default=None,
                        help="the web at epoch 0: warm (feeds full of their recent entries; "
                        "the news scenarios' default) or empty (the papers' default)")
    parser.add_argument("--curve", action="store_true",
                        help="add the learning curve (reward over the first 24/48/120/480 "
                        "epochs against the bound and the first-look oracle)")
    parser.add_argument("--discovery", action="store_true",
                        help="a discovery sweep: the learners fetch every source once at "
                        "epoch 0 outside the budget (its capture reported apart, left out of "
                        "rewards and learning curve)")
    parser.add_argument("--hosts", default="allowance",
                        help="on a scenario with hosts (news-hosts), how their limits are "
                        "handled, comma-separated: allowance (a constraint of the plan), "
                        "costs (a crawl cost and a saturated download slot)")
    parser.add_argument("--rate-limit", type=float, default=None, metavar="R",
                        help="news-hosts: host 0 answers 429 above R requests per epoch")
    parser.add_argument("--retry-after", action="store_true",
                        help="with --rate-limit: the 429s carry Retry-After (the crawler "
                        "sends that host nothing in the next epoch)")
    parser.add_argument("--max-interval", type=float, default=None, metavar="UNITS",
                        help="the longest a source waits between two crawls, in the "
                        "scenario's time unit (hours on a trace and the news scenarios), for "
                        "the index policies (the rules keep their own)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--perf", action="store_true",
                        help="measure decision time, simulator speed and memory at --n sources")
    parser.add_argument("--epochs", type=int, default=20, help="epochs measured by --perf")
    parser.add_argument("--values", choices=VALUES, default="base",
                        help="what a policy is told of an item's value: its base value, or "
                        "only each crawl's captured total at the items' ages, as a crawl is")
    parser.add_argument("--volume-of", default=None, metavar="RULE",
                        help="budget = the mean crawls per epoch of policy RULE run unconstrained "
                        "on the same scenario and seeds (its own request volume)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.perf:
        n = args.n or 1_000_000
        report = perf(n=n, epochs=args.epochs, budget=budget_of(args.budget, n),
                      warm=args.warmup)
        emit(report, args.json, format_perf)
        return 0
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    try:
        for name in policies:
            check_policy_name(name)
        scenario, horizon = build_scenario(args)
        volume = None
        if args.volume_of:
            check_policy_name(args.volume_of)
            volume = rule_volume(scenario, args.volume_of, horizon=horizon,
                                 seeds=args.seeds, warmup=args.warmup)
            scenario = replace(scenario, budget=volume)
        report = evaluate(scenario, policies, horizon=horizon, seeds=args.seeds,
                          warmup=args.warmup, curve=args.curve, discovery=args.discovery,
                          hosts=tuple(h.strip() for h in args.hosts.split(",") if h.strip()),
                          values=args.values, max_interval=args.max_interval)
    except (ValueError, OSError) as exc:
        print(f"sim.bench: error: {exc}", file=sys.stderr)
        return 2
    if volume is not None:
        report["volume_of"] = {"policy": args.volume_of, "volume": volume}
        if not args.json:
            print(f"budget: the volume of {args.volume_of} unconstrained, {volume:.4f} "
                  "crawls/epoch")
    emit(report, args.json, format_results)
    return 0
