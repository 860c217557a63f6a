"""``WHITTLE_POLICY`` and ``WHITTLE_POLICY_OPTIONS``: the policy a crawl runs, built in one place.

The option names are checked against the policy's constructor when the settings are read
(:func:`check_option_names`); their values only the constructor can judge, so every build of
the policy goes through :func:`build_policy`, which turns the constructor's refusal into an
:class:`InvalidSetting` naming the setting, its value, the policy and the reason. The start-up
check builds the policy once for one source (:func:`check_option_values`) so that a refused
value stops the crawl before the spider opens; the re-crawl service builds the real one.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
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
    option of the same name). A value the
    constructor refuses (its TypeError or ValueError) is an InvalidSetting naming the
    setting, its value, the policy and the reason; without options, the refusal is the
    caller's own defect and goes on as it is."""
    try:
        return make_policy(config.core_policy, problem, rng=config.seed,
                           **{**config.policy_options, **supplied})
    except (TypeError, ValueError) as exc:
        if not config.policy_options:
            raise
        raise InvalidSetting(f"WHITTLE_POLICY_OPTIONS ({config.policy_options!r}) for policy "
                             f"{config.policy!r}: {exc}") from exc


def check_option_values(config: PolicySettings) -> None:
    """Build the policy once, for one source, with ``WHITTLE_POLICY_OPTIONS``, so that a value
    it refuses (``{"device": "cuda"}`` for dqn where torch sees no GPU, say) stops the crawl at
    start-up, in one line, rather than in a traceback when the scheduler opens.

    Skipped where one source cannot stand for the crawl: a policy built on the oracle's daily
    rhythms, and options of one value per source (diurnal-whittle's ``groups``, a
    ``prior_half_life`` list), whose length is the number of sources. Those are checked
    when the service builds the policy, through the same :func:`build_policy`."""
    if not config.policy_options:
        return
    cls = policy_class(config.core_policy)
    per_source = any(isinstance(v, list | tuple | np.ndarray) and len(v) > _PER_SOURCE_LENGTH
                     for v in config.policy_options.values())
    if cls.needs_rhythms or per_source:
        return
    if cls.needs_parameters:
        problem = Problem(n=1, period=config.period, alpha=np.array([0.5]), u=np.array([1.0]))
    else:
        problem = Problem(n=1, period=config.period)
    build_policy(config, problem)
