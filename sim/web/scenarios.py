"""Named scenarios: the papers' numerical examples and a synthetic news mix.

A :class:`Scenario` is pure data (parameters, budget, model options); ``make_env()`` builds the
simulator for it. Every scenario speaks the same (alpha, u) language through
``scenario.problem`` (see ``scrapy_whittle.core.problem``).

* ``tcns2018``: Table I of *Whittle Index Policy for Crawling Ephemeral Content* (IEEE TCNS
  2018): four sources, Lambda = 250, xi = (1, .7, .2, .08), mu = (.7, .35, .7, .21), T = 1;
  budget M = 1 (default) or 2; deterministic mean dynamics unless ``stochastic=True``
  (the paper's Section VII / Inria RR 8702 Section 7 model, eq. (17)).
* ``allerton2019``: the example of *A learning algorithm for the Whittle index policy for
  scheduling web crawlers* (Allerton 2019), which is Table I again, stochastic, M = 1.
* ``icc2021-single`` / ``icc2021-groups``: *Deep Reinforcement Learning for Web Crawling*
  (ICC 2021): pages change as Poisson processes (per slot rates lambda), importance
  m = (5, 0.2, 1, 0.5), one crawl per slot. ``single``: one page per group, lambda =
  (0.6, 0.08, 0.01, 0.3). ``groups``: (5, 80, 10, 5) pages with lambda = (0.1, 0.002, 0.005,
  0.05); the paper does not restate the importances for this example, we keep the same m.
* ``news-mix``: N synthetic news feeds with heavy-tailed publishing rates and item values
  (log-normal), interest half-lives from minutes to days; time unit one hour, epoch T = 1 h,
  default budget 1% of the sources per epoch.
* ``news-hosts``: a news mix of N sources (default 1,000) on 20 hosts: host 0 holds 50
  feeds (a platform that answers 429 above ``rate_limit`` requests per epoch when that
  option is given, with Retry-After when ``retry_after``), the others hold the rest in
  Zipf-like sizes; the ten largest of those allow 0.5-3 crawls per epoch (their
  ``host_limits``); default budget 5% of the sources per epoch.
* ``news-diurnal``: the same sources (same Lambda, xi, mu for the same ``n`` and ``seed``)
  publishing with daily rhythms (``sim.web.profiles.draw_profile``: newsroom hours, time zones,
  day/night ratios 1.5-16; ``weekend=True`` adds a weekend factor), simulated by
  ``sim.web.diurnal.DiurnalWeb``; ``scenario.periodic`` gives u_i(tau) for every epoch of the day.

Epochs of the news scenarios (``step=``, minutes): one hour by default; ``step=1`` makes an
epoch one minute, as the re-crawl service decides, the time unit staying the hour: the
simulator's period is step / 60 h, the budget (crawls per hour) is spent step / 60 of it per
epoch, a host's allowance likewise, and the policies decide at fractional epochs of one
hour (``resolution``), so that the rules keep their intervals in hours. Only the news
scenarios have a clock: the papers' reject ``step``.

Start (``start=``, an environment option): "warm" (the default for ``news-mix`` and
``news-diurnal``: the web has been publishing for a long time, each feed holds what the
stationary law puts there, see ``sim.web.ephemeral``) or "empty" (the default for the papers'
scenarios, whose tables start from X(0) = 0). ``scenario.problem`` of a warm scenario carries
the stationary X(0) as ``initial_state``, what an oracle knows.

A recorded trace (``sim.web.trace``) is a scenario of kind ``"trace"`` (``python -m sim.bench
--trace FILE`` builds it): the replay (``sim.web.trace.TraceReplay``) publishes what was recorded,
and ``params`` are the parameters fitted to it (``TraceReplay.fitted_params``), what the
oracle policies and the upper bound are given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import numpy as np

from scrapy_whittle.core.problem import Problem, SourceParams

TCNS2018_PARAMS = SourceParams(
    rate=np.full(4, 250.0),
    mean_utility=np.array([1.0, 0.7, 0.2, 0.08]),
    decay=np.array([0.7, 0.35, 0.7, 0.21]),
    period=1.0,
)

ICC2021_IMPORTANCE = np.array([5.0, 0.2, 1.0, 0.5])
ICC2021_SINGLE_RATES = np.array([0.6, 0.08, 0.01, 0.3])
ICC2021_GROUP_RATES = np.array([0.1, 0.002, 0.005, 0.05])
ICC2021_GROUP_SIZES = np.array([5, 80, 10, 5])

SCENARIOS = ("tcns2018", "allerton2019", "icc2021-single", "icc2021-groups", "news-mix",
             "news-diurnal", "news-hosts")
#: the scenarios whose time unit is the hour, which may run at epochs of other lengths
#: (``step``); the papers' scenarios count time in their own abstract epochs
NEWS_SCENARIOS = ("news-mix", "news-diurnal", "news-hosts")
#: the news scenarios' own epoch, in minutes
HOUR_MINUTES = 60.0


@dataclass(frozen=True)
class Scenario:
    """A named problem instance.

    kind: "ephemeral" (sim.web.ephemeral.EphemeralWeb), "pages" (sim.web.pages.ChangingPages),
        "diurnal" (sim.web.diurnal.DiurnalWeb, with ``profile``) or "trace"
        (sim.web.trace.TraceReplay of ``trace``, ``params`` fitted to it).
    params: ephemeral-content parameters (kind "ephemeral").
    change_rate, importance, groups: per-page arrays (kind "pages").
    budget: crawl budget per epoch (cost units; unit costs unless ``cost`` is given).
    options: extra keyword arguments for the environment (stochastic, window, lifetime, ...).
    """

    name: str
    kind: str
    budget: float
    params: SourceParams | None = None
    change_rate: np.ndarray | None = None
    importance: np.ndarray | None = None
    groups: np.ndarray | None = None
    cost: np.ndarray | None = None
    options: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    profile: Any = None          # sim.web.profiles.DiurnalProfile (kind "diurnal")
    trace: Any = None            # scrapy_whittle.report.trace.Trace (kind "trace")
    #: host id of each source (None: no hosts), each host's allowance (crawls per epoch the
    #: crawler is told, inf = none) and the rate above which it answers 429 (requests per
    #: epoch, inf = never; what the crawler must find out)
    hosts: np.ndarray | None = None
    host_limits: np.ndarray | None = None
    host_rates: np.ndarray | None = None
    retry_after: bool = False    # the 429s carry Retry-After
    #: the simulator's epoch as a share of the policies' (< 1: the policies decide every
    #: epoch of the simulator, at fractional epochs of their own, as the re-crawl service
    #: does with WHITTLE_STEP; ``policy_problem`` is the problem in their epochs)
    resolution: float = 1.0

    @property
    def policy_problem(self) -> Problem:
        """The problem as the policies see it, in their epochs (``resolution``)."""
        if self.resolution == 1.0:
            return self.problem
        period = self.params.period / self.resolution
        return replace(self, params=replace(self.params, period=period),
                       resolution=1.0).problem

    @property
    def n(self) -> int:
        return self.params.n if self.params is not None else int(self.change_rate.shape[0])

    @property
    def periodic(self):
        """u_i(tau) per phase of the rhythm (``scrapy_whittle.core.periodic.PeriodicArrivals``);
        None for scenarios without a rhythm."""
        if self.kind != "diurnal":
            return None
        from sim.web.diurnal import periodic_arrivals

        return periodic_arrivals(self.params, self.profile)

    @property
    def day(self) -> float | None:
        """Length of a day in the scenario's time unit (24 for the news scenarios and a
        recorded trace, whose unit is the hour; None where the time unit is abstract)."""
        if self.profile is not None:
            return float(self.profile.day)
        return 24.0 if self.name in ("news-mix", "news-hosts") or self.kind == "trace" else None

    @property
    def start(self) -> str:
        return self.options.get("start", "empty")

    def warm_state(self) -> np.ndarray | None:
        """X(0) of a warm start (the never-crawled stationary value), None for an empty one."""
        if self.start != "warm":
            return None
        from sim.web.ephemeral import stationary_state

        return stationary_state(self.params, self.options.get("lifetime"))

    @property
    def problem(self) -> Problem:
        """The oracle problem (true parameters included; for a rhythm, the time-average of
        u_i(tau): what a rhythm-blind oracle knows)."""
        if self.kind == "diurnal":
            periodic = self.periodic
            return Problem(n=self.n, cost=self.cost, period=self.params.period,
                           alpha=periodic.alpha, u=periodic.mean_u,
                           initial_state=self.warm_state())
        if self.kind in ("ephemeral", "trace"):
            # a trace's replay starts from what was recorded, not from a stationary state
            warm = self.warm_state() if self.kind == "ephemeral" else None
            return Problem.from_params(self.params, cost=self.cost, groups=self.groups,
                                       initial_state=self.options.get("initial_state")
                                       if warm is None else warm)
        return Problem.from_pages(self.change_rate, self.importance, cost=self.cost,
                                  groups=self.groups)

    def with_options(self, **options: Any) -> Scenario:
        return replace(self, options={**self.options, **options})

    def make_env(self):
        """Build the simulator of this scenario (reset it with a seed before use)."""
        if self.kind == "diurnal":
            from sim.web.diurnal import DiurnalWeb

            return DiurnalWeb(self.params, self.profile, budget=self.budget, cost=self.cost,
                              **self.options)
        if self.kind == "trace":
            from sim.web.trace import TraceReplay

            return TraceReplay(self.trace, self.budget, decay=self.params.decay,
                               period=self.params.period, cost=self.cost, params=self.params,
                               **self.options)
        if self.kind == "ephemeral":
            from sim.web.ephemeral import EphemeralWeb

            return EphemeralWeb(self.params, budget=self.budget, cost=self.cost, **self.options)
        from sim.web.pages import ChangingPages

        return ChangingPages(self.change_rate, self.importance, budget=self.budget,
                             groups=self.groups, cost=self.cost, **self.options)


def news_mix_params(n: int, seed: int = 0) -> SourceParams:
    """Heavy-tailed synthetic news sources (time unit: one hour).

    rate: log-normal, median 0.5 items/h, sigma 1.5 (a few sources publish 50+ items/h);
    mean utility: log-normal, median 1, sigma 1; interest half-life: log-normal, median 6 h,
    sigma 1.2, clipped to [15 min, 7 days].
    """
    if not 1 <= n <= 10_000_000:
        raise ValueError(f"n ({n!r}) must be between 1 and 10,000,000")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 2018]))
    rate = 0.5 * rng.lognormal(0.0, 1.5, n)
    xi = rng.lognormal(0.0, 1.0, n)
    half_life = np.clip(6.0 * rng.lognormal(0.0, 1.2, n), 0.25, 24.0 * 7)
    return SourceParams(rate=rate, mean_utility=xi, decay=math.log(2) / half_life, period=1.0)


#: hosts of ``news-hosts``, the platform's feeds, and how many of the largest other hosts
#: have an allowance
NEWS_HOSTS, PLATFORM_FEEDS, LIMITED_HOSTS = 20, 50, 10


def news_hosts(n: int, seed: int = 0, rate_limit: float = math.inf
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(host of each source, allowance of each host, rate of each host) of ``news-hosts``:
    host 0 holds ``PLATFORM_FEEDS`` sources (fewer when n is small) and answers 429 above
    ``rate_limit`` requests per epoch; the others share the rest in Zipf-like sizes (largest
    first), the ``LIMITED_HOSTS`` largest allowing 0.5 to 3 crawls per epoch."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 27]))
    platform = min(PLATFORM_FEEDS, n // NEWS_HOSTS + 1)
    weights = 1.0 / np.arange(1, NEWS_HOSTS) ** 0.8
    sizes = np.floor(weights / weights.sum() * (n - platform)).astype(np.int64)
    sizes[0] += n - platform - int(sizes.sum())
    hosts = np.concatenate([np.zeros(platform, dtype=np.int64),
                            np.repeat(np.arange(1, NEWS_HOSTS), sizes)])
    hosts = hosts[rng.permutation(n)]
    limits = np.full(NEWS_HOSTS, np.inf)
    limits[1:1 + LIMITED_HOSTS] = rng.choice(np.arange(0.5, 3.01, 0.5), LIMITED_HOSTS)
    rates = np.full(NEWS_HOSTS, np.inf)
    rates[0] = rate_limit
    return hosts, limits, rates


def make_scenario(name: str, *, budget: float | None = None, n: int | None = None,
                  stochastic: bool | None = None, seed: int = 0, start: str | None = None,
                  step: float | None = None, **options: Any) -> Scenario:
    """The scenario called ``name``; ``budget``, ``n``, ``stochastic``, ``start`` override its
    defaults; ``step``: the epoch in minutes of a news scenario (default an hour; see the
    module docstring), ``budget`` staying crawls per hour.

    ``seed`` only affects scenarios whose parameters are drawn at random (``news-mix``); the
    simulator's own randomness is seeded by ``env.reset(seed=...)``.
    """
    if step is not None and name in SCENARIOS and name not in NEWS_SCENARIOS:
        raise ValueError(f"scenario {name!r} counts time in its own epochs, not minutes: "
                         f"--step applies to a --trace and to {', '.join(NEWS_SCENARIOS)}")
    scenario = _make_scenario(name, budget=budget, n=n, stochastic=stochastic, seed=seed,
                              start=start, **options)
    return scenario if step is None else at_step(scenario, step)


def at_step(scenario: Scenario, step: float) -> Scenario:
    """The news ``scenario`` (hourly epochs) with epochs of ``step`` minutes: the period, the
    budget and the hosts' allowances scaled by step / 60, the policies deciding at fractional
    epochs of their hour (``resolution``); at 60 the scenario itself."""
    if not (math.isfinite(step) and step > 0):
        raise ValueError(f"--step ({step!r}) must be > 0 minutes")
    if step == HOUR_MINUTES:
        return scenario
    if np.any(np.isfinite(scenario.host_rates if scenario.host_rates is not None else [])):
        raise ValueError("a rate limit counts requests per hourly epoch: run news-hosts "
                         "with --rate-limit at --step 60")
    scale = step / HOUR_MINUTES
    params = replace(scenario.params, period=scenario.params.period * scale)
    limits = scenario.host_limits
    profile = scenario.profile
    if profile is not None:
        # an epoch must be a whole number of the rhythm's bins: the same rhythm on bins
        # narrow enough (a minute's epochs: bins of a minute)
        ratio = Fraction(profile.bin_width / params.period).limit_denominator(10_000)
        profile = profile.refined(ratio.numerator)
    return replace(scenario, params=params, budget=scenario.budget * scale,
                   resolution=min(1.0, scale), profile=profile,
                   host_limits=None if limits is None else limits * scale)


def _make_scenario(name: str, *, budget: float | None, n: int | None,
                   stochastic: bool | None, seed: int, start: str | None,
                   **options: Any) -> Scenario:
    if start is not None:
        from sim.web.ephemeral import check_start

        check_start(start)
        if name.startswith("icc2021-") and start == "warm":
            raise ValueError(f"scenario {name!r} (changing pages) has no warm start")
    if name in ("news-mix", "news-diurnal"):
        options["start"] = "warm" if start is None else start
    elif start == "warm":                   # the papers' scenarios start empty unless told
        options["start"] = start
    if name in ("tcns2018", "allerton2019"):
        if n is not None:
            raise ValueError(f"scenario {name!r} has a fixed number of sources (4)")
        default_stochastic = name == "allerton2019"
        opts = {"stochastic": default_stochastic if stochastic is None else stochastic,
                **options}
        return Scenario(name=name, kind="ephemeral", budget=1.0 if budget is None else budget,
                        params=TCNS2018_PARAMS, options=opts,
                        description="Avrachenkov & Borkar, IEEE TCNS 2018, Table I")
    if name.startswith("icc2021-") and stochastic is False:
        raise ValueError(f"scenario {name!r} is the page-change model, stochastic by nature; "
                         "it has no deterministic version")
    if name == "icc2021-single":
        if n is not None:
            raise ValueError(f"scenario {name!r} has a fixed number of pages (4)")
        return Scenario(name=name, kind="pages", budget=1.0 if budget is None else budget,
                        change_rate=ICC2021_SINGLE_RATES, importance=ICC2021_IMPORTANCE,
                        groups=np.arange(4), options=options,
                        description="Avrachenkov, Borkar & Patil, ICC 2021, one page per group")
    if name == "icc2021-groups":
        if n is not None:
            raise ValueError(f"scenario {name!r} has a fixed number of pages (100)")
        groups = np.repeat(np.arange(4), ICC2021_GROUP_SIZES)
        return Scenario(name=name, kind="pages", budget=1.0 if budget is None else budget,
                        change_rate=ICC2021_GROUP_RATES[groups],
                        importance=ICC2021_IMPORTANCE[groups], groups=groups, options=options,
                        description="Avrachenkov, Borkar & Patil, ICC 2021, pages (5, 80, 10, 5)")
    if name == "news-mix":
        n = 10_000 if n is None else int(n)
        params = news_mix_params(n, seed)
        opts = {"stochastic": bool(stochastic), **options}
        return Scenario(name=name, kind="ephemeral",
                        budget=max(1.0, round(0.01 * n)) if budget is None else budget,
                        params=params, options=opts,
                        description=f"synthetic news mix of {n} heavy-tailed sources")
    if name == "news-diurnal":
        from sim.web.profiles import draw_profile

        n = 10_000 if n is None else int(n)
        params = news_mix_params(n, seed)
        weekend = bool(options.pop("weekend", False))
        opts = {"stochastic": bool(stochastic), **options}
        return Scenario(name=name, kind="diurnal",
                        budget=max(1.0, round(0.01 * n)) if budget is None else budget,
                        params=params, options=opts,
                        profile=draw_profile(n, seed, day=24.0, weekend=weekend),
                        description=f"news mix of {n} sources with daily rhythms"
                                    + (" and weekends" if weekend else ""))
    if name == "news-hosts":
        n = 1000 if n is None else int(n)
        params = news_mix_params(n, seed)
        rate_limit = float(options.pop("rate_limit", math.inf))
        retry_after = bool(options.pop("retry_after", False))
        hosts, limits, rates = news_hosts(n, seed, rate_limit)
        opts = {"stochastic": bool(stochastic), **options}
        return Scenario(name=name, kind="ephemeral",
                        budget=max(1.0, round(0.05 * n)) if budget is None else budget,
                        params=params, options=opts, hosts=hosts, host_limits=limits,
                        host_rates=rates, retry_after=retry_after,
                        description=f"news mix of {n} sources on {limits.shape[0]} hosts")
    raise ValueError(f"unknown scenario {name!r}; known scenarios: {', '.join(SCENARIOS)}")
