"""``WHITTLE_POLICY`` and ``WHITTLE_POLICY_OPTIONS``: the policy a crawl runs, built in one place.

The option names are checked against the policy's constructor when the settings are read
(:func:`check_option_names`); their values only the constructor can judge, so every build of
the policy goes through :func:`build_policy`, which turns the constructor's refusal into an
:class:`InvalidSetting` naming the setting, its value, the policy and the reason. The start-up
check builds the policy once (:func:`check_policy_build`: for the sources the crawl starts
with, or one standing for them) so that a refusal stops the crawl before the spider opens;
the re-crawl service builds the real one.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np

from scrapy_whittle.core.policies import POLICIES, Policy, make_policy, policy_class
from scrapy_whittle.core.problem import Problem
from scrapy_whittle.service.invalid_setting import InvalidSetting

#: constructor parameters the service supplies itself, never an option
_SUPPLIED = ("problem", "rng")

#: an option holding a sequence this long is taken for one value per source: it cannot be
#: tried on the one-source problem of the start-up check
_PER_SOURCE_LENGTH = 4


class PolicySettings(Protocol):
    """What building the policy reads of the settings (a ``WhittleConfig`` has it all);
    a protocol, so that this module need not import the configuration that imports it."""

    # read-only (properties), as the frozen WhittleConfig's fields are
    @property
    def policy(self) -> str: ...
    @property
    def core_policy(self) -> str: ...
    @property
    def policy_options(self) -> dict[str, Any]: ...
    @property
    def seed(self) -> int: ...
    @property
    def period(self) -> float: ...
    def longest_interval(self, total_cost: float = 0.0) -> float | None: ...


def policy_names() -> str:
    """The accepted ``WHITTLE_POLICY`` values, for error messages and docs."""
    others = sorted(set(POLICIES) - {"whittle", "oracle"})
    return ("'whittle' (the Whittle index on learned parameters), 'oracle' (the Whittle index "
            "on WHITTLE_ORACLE_PARAMS), " + ", ".join(f"'{name}'" for name in others))


def check_option_names(cls: type, policy: str, options: Mapping[str, Any]) -> None:
    """Refuse ``WHITTLE_POLICY_OPTIONS`` the policy's constructor has no parameter for (a
    constructor taking ``**kwargs`` checks its own when the policy is built)."""
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return
    names = sorted(p.name for p in params if p.name not in _SUPPLIED and p.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY))
    unknown = sorted(set(map(str, options)) - set(names))
    if unknown:
        allowed = ", ".join(names) if names else "none"
        raise InvalidSetting(f"WHITTLE_POLICY_OPTIONS ({dict(options)!r}) has no option "
                             f"{unknown[0]!r} for policy {policy!r} (its options: {allowed})")


def build_policy(config: PolicySettings, problem: Problem, **supplied: Any) -> Policy:
    """The policy of ``config`` for ``problem``, with ``WHITTLE_POLICY_OPTIONS`` and the
    arguments the caller ``supplied`` (a rhythm-aware oracle's arrivals, which win over an
    option of the same name). A refusal of the constructor (its TypeError or ValueError) is an
    InvalidSetting naming the setting, its value, the policy and the reason: the options when
    there are any, else the policy and the number of sources it was built for (the original
    error stays chained to it)."""
    if policy_class(config.core_policy).takes_max_interval \
            and "max_interval" not in config.policy_options:
        supplied = {"max_interval": config.longest_interval(float(np.sum(problem.cost))),
                    **supplied}
    try:
        return make_policy(config.core_policy, problem, rng=config.seed,
                           **{**config.policy_options, **supplied})
    except (TypeError, ValueError) as exc:
        if config.policy_options:
            raise InvalidSetting(f"WHITTLE_POLICY_OPTIONS ({config.policy_options!r}) for "
                                 f"policy {config.policy!r}: {exc}") from exc
        raise InvalidSetting(f"WHITTLE_POLICY ({config.policy!r}) cannot be built for "
                             f"{problem.n} source(s): {exc}") from exc


def check_policy_build(config: PolicySettings, n_sources: Callable[[], int]) -> None:
    """Build the policy once, as the crawl will, so that a refusal (a value of
    ``WHITTLE_POLICY_OPTIONS`` such as ``{"device": "cuda"}`` for dqn where torch sees no GPU,
    a list of one value per source that does not have one per source, a policy that cannot
    start from no source) stops the crawl at start-up, in one line, rather than in a
    traceback when the scheduler opens.

    Built for ``n_sources()`` (the distinct sources the crawl starts with; 0 for a list at a
    URL, fetched later) when an option has one value per source (diurnal-whittle's
    ``groups``, a ``prior_half_life`` list) or there is no source, else for one source
    standing for them (a million would be built twice). A crawl resumed from a JOBDIR may
    hold more sources than its list, and a policy built on the oracle's daily rhythms needs
    what the re-crawl service derives from the oracle's document (skipped here): the service
    checks those as it builds the policy, through the same :func:`build_policy`, and the
    scheduler reports a refusal there as one ERROR line too."""
    cls = policy_class(config.core_policy)
    if cls.needs_rhythms:
        return
    per_source = any(isinstance(v, list | tuple | np.ndarray) and len(v) > _PER_SOURCE_LENGTH
                     for v in config.policy_options.values())
    n = n_sources()
    n = n if per_source or n == 0 else 1
    if cls.needs_parameters:
        problem = Problem(n=n, period=config.period, alpha=np.full(n, 0.5), u=np.ones(n))
    else:
        problem = Problem(n=n, period=config.period)
    build_policy(config, problem)
