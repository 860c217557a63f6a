"""Every ``WHITTLE_*`` setting: defaults in one place, validated once at start-up.

:func:`WhittleConfig.from_settings` reads a Scrapy ``Settings`` object (or any mapping: the
module imports nothing of Scrapy, so the re-crawl service and the simulator use the same
configuration) and raises :class:`InvalidSetting` naming the setting and its value for
anything it cannot use, so a typo stops the crawl before the first request instead of an hour
into it. The table of settings with their meaning is in ``docs/scrapy.md``.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

DEFAULTS: dict[str, Any] = {
    "WHITTLE_SOURCES": None,            # OPML / text / JSON file or URL, or list of URLs
    "WHITTLE_SOURCES_REFRESH": 0.0,     # s between two reads of the list (0: once, at start)
    "WHITTLE_POLICY": "whittle",        # "whittle" = index on estimated parameters
    "WHITTLE_POLICY_OPTIONS": {},       # keyword arguments for the policy's constructor
    "WHITTLE_ORACLE_PARAMS": None,      # JSON file (or dict) of true parameters, for "oracle"
    "WHITTLE_BUDGET": None,             # crawls (cost units) per WHITTLE_PERIOD; required
    "WHITTLE_PERIOD": 3600.0,           # epoch length T in seconds
    "WHITTLE_SPREAD": False,            # spread an epoch's crawls evenly over the epoch
    "WHITTLE_SEED": 0,                  # seed of the policy's random generator
    "WHITTLE_MIN_INTERVAL": 0.0,        # seconds between two crawls of one source (all sources)
    "WHITTLE_BACKOFF_BASE": 60.0,       # seconds of back-off after a source's first failure
    "WHITTLE_BACKOFF_MAX": 86400.0,     # cap of the exponential back-off
    "WHITTLE_HINTS": True,              # honour Retry-After, max-age, <ttl>, skipHours/Days
    "WHITTLE_HINTS_MAX_DELAY": 86400.0,  # cap (s) of any "not before" a server or feed asks
    "WHITTLE_CONDITIONAL_GET": True,    # send If-None-Match / If-Modified-Since
    "WHITTLE_MAX_FEED_SIZE": 10 * 1024 * 1024,  # bytes; larger bodies are an error "too_large"
    "WHITTLE_MAX_ENTRIES_PER_SOURCE": 10_000,   # entries read per feed / remembered per source
    "WHITTLE_ENGAGEMENT_SCALE": 1.0,    # item value = engagement / scale
    "WHITTLE_ITEM_VALUE": 1.0,          # value of an entry without engagement (x source weight)
    "WHITTLE_LOGSTATS_INTERVAL": 60.0,  # seconds between progress lines; 0 disables
    "WHITTLE_STATE": True,              # save / restore learned state in JOBDIR
    "WHITTLE_CHECKPOINT_INTERVAL": 5.0,  # seconds between two checkpoints of the state
    "WHITTLE_MAX_EPOCHS": None,         # stop after this many epochs (None: never)
    "WHITTLE_CLOCK": None,              # a clock object (scrapy_whittle.service.clock); None: system
    # many processes, one crawl (docs/cluster.md); unset URL: one process, state in JOBDIR
    "WHITTLE_REDIS_URL": None,          # redis://host:port/db (else REDIS_URL, else none)
    "WHITTLE_REDIS_PREFIX": "whittle:{spider}",  # key prefix of the crawl ({spider}: name)
    "WHITTLE_REDIS_LEASE": None,        # s a worker may hold a crawl; None: as for JOBDIR
    "WHITTLE_REDIS_LOCK_TTL": 10.0,     # s the planner's lock lives without renewal
    "WHITTLE_REDIS_BACKLOG": 256,       # crawls in flight across the cluster, at most
    "WHITTLE_HALF_LIFE": None,          # prior half-life of interest (s): number, or a dict
                                        # {url or category: seconds, "*": fallback}
    # -- feed parsing (ParsingConfig) --
    "WHITTLE_FEED_PARSER": "feedparser-rs",  # or "feedparser"
    "WHITTLE_PARSE_WORKERS": 2,         # worker processes for large feeds; 0: all inline
    "WHITTLE_PARSE_INLINE_MAX_BYTES": None,  # larger bodies go to a worker; None: parser's
    "WHITTLE_PARSE_TIMEOUT": 60.0,      # seconds a worker may spend on one feed
    "WHITTLE_MAX_FEED_ENTRIES": None,   # entries kept per feed (first N); None: as below
    "WHITTLE_MAX_FIELD_LENGTH": 2048,   # characters of a title / link / id
}


class InvalidSetting(ValueError):
    """A ``WHITTLE_*`` setting (or the sources file it names) cannot be used. The message
    names the setting, its value and what is allowed. (Not Scrapy's ``NotConfigured``, which
    would merely disable a middleware and let the crawl run without it.)

    The one exception class of bad configuration: raised at start-up, before the spider
    opens; ``scrapy crawl`` then logs it as one ERROR line and exits with status 1
    (:mod:`scrapy_whittle.scrapy.startup`)."""

    #: set once the message has been logged (the start-up check logs it itself)
    reported: bool = False


def policy_names() -> str:
    """The accepted ``WHITTLE_POLICY`` values, for error messages and docs."""
    from scrapy_whittle.core.policies import POLICIES

    others = sorted(set(POLICIES) - {"whittle", "oracle"})
    return ("'whittle' (the Whittle index on learned parameters), 'oracle' (the Whittle index "
            "on WHITTLE_ORACLE_PARAMS), " + ", ".join(f"'{name}'" for name in others))


def _check_options(cls_: type, policy: str, options: Mapping[str, Any]) -> None:
    """Refuse ``WHITTLE_POLICY_OPTIONS`` the policy's constructor has no parameter for (a
    constructor taking ``**kwargs`` checks its own when the policy is built)."""
    params = list(inspect.signature(cls_.__init__).parameters.values())[1:]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return
    names = sorted(p.name for p in params if p.name not in ("problem", "rng") and p.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY))
    unknown = sorted(set(map(str, options)) - set(names))
    if unknown:
        allowed = ", ".join(names) if names else "none"
        raise _fail("WHITTLE_POLICY_OPTIONS", dict(options),
                    f"has no option {unknown[0]!r} for policy {policy!r} (its options: "
                    f"{allowed})")


def _fail(name: str, value: Any, why: str) -> InvalidSetting:
    return InvalidSetting(f"{name} ({value!r}) {why}")


def refused_option(config: WhittleConfig, exc: Exception) -> InvalidSetting:
    """The error of a ``WHITTLE_POLICY_OPTIONS`` value the policy's constructor refused
    (``exc``, its TypeError or ValueError): the setting, its value, the policy, the reason."""
    return InvalidSetting(f"WHITTLE_POLICY_OPTIONS ({config.policy_options!r}) for policy "
                          f"{config.policy!r}: {exc}")


def _number(settings, name: str, *, minimum: float | None = None, strict: bool = False,
            integer: bool = False) -> float:
    raw = settings.get(name, DEFAULTS[name])
    if isinstance(raw, bool):
        raise _fail(name, raw, "must be a number")
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise _fail(name, raw, "must be a number") from None
    if not math.isfinite(value):
        raise _fail(name, raw, "must be finite")
    if integer and value != int(value):
        raise _fail(name, raw, "must be an integer")
    if minimum is not None and (value <= minimum if strict else value < minimum):
        raise _fail(name, raw, f"must be {'>' if strict else '>='} {minimum:g}")
    return int(value) if integer else value


def _json_object(name: str, value: Any) -> Any:
    """A dict setting given as JSON text (``scrapy crawl -s NAME='{"a": 1}'`` gives every
    value as a string; Scrapy's own ``getdict`` reads such text the same way); anything
    else as it is."""
    if hasattr(value, "copy_to_dict"):
        return value.copy_to_dict()
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise _fail(name, value, f"is not valid JSON: {exc}") from None
    return value


def _half_life(settings) -> float | dict[str, float] | None:
    raw = _json_object("WHITTLE_HALF_LIFE", settings.get("WHITTLE_HALF_LIFE", None))
    if raw is None:
        return None

    def seconds(key: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise _fail(key, value, "must be a number of seconds > 0")
        try:
            number = float(value)
        except ValueError:
            raise _fail(key, value, "must be a number of seconds > 0") from None
        if not (math.isfinite(number) and number > 0):
            raise _fail(key, value, "must be a number of seconds > 0")
        return number

    if isinstance(raw, Mapping):
        return {str(k): seconds(f"WHITTLE_HALF_LIFE[{k!r}]", v) for k, v in raw.items()}
    return seconds("WHITTLE_HALF_LIFE", raw)


def _clock(settings) -> Any:
    clock = settings.get("WHITTLE_CLOCK", None)
    if clock is not None and not (callable(getattr(clock, "now", None))
                                  and callable(getattr(clock, "wait", None))):
        raise _fail("WHITTLE_CLOCK", clock, "must be a clock object with now() and wait() "
                    "(scrapy_whittle.service.clock.SimulatedClock), or None for the system clock")
    return clock


def _redis(settings) -> dict[str, Any]:
    url = settings.get("WHITTLE_REDIS_URL", None) or settings.get("REDIS_URL", None)
    if url is not None and not (isinstance(url, str) and url.split("://")[0] in
                                ("redis", "rediss", "unix")):
        raise _fail("WHITTLE_REDIS_URL", url, "must be a redis://, rediss:// or unix:// URL")
    prefix = settings.get("WHITTLE_REDIS_PREFIX", DEFAULTS["WHITTLE_REDIS_PREFIX"])
    if not isinstance(prefix, str) or not prefix.strip():
        raise _fail("WHITTLE_REDIS_PREFIX", prefix, "must be a non-empty string")
    lease = None
    if settings.get("WHITTLE_REDIS_LEASE", None) is not None:
        lease = _number(settings, "WHITTLE_REDIS_LEASE", minimum=0, strict=True)
    return {"redis_url": url or None, "redis_prefix": prefix, "redis_lease": lease,
            "redis_lock_ttl": _number(settings, "WHITTLE_REDIS_LOCK_TTL", minimum=0,
                                      strict=True),
            "redis_backlog": _number(settings, "WHITTLE_REDIS_BACKLOG", minimum=1,
                                     integer=True)}


def _bool(settings, name: str) -> bool:
    raw = settings.get(name, DEFAULTS[name])
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int | float) and raw in (0, 1):
        return bool(raw)
    if isinstance(raw, str) and raw.strip().lower() in ("1", "0", "true", "false", "yes", "no"):
        return raw.strip().lower() in ("1", "true", "yes")
    raise _fail(name, raw, "must be a boolean")


# -- feed parsing ------------------------------------------------------------------------
@dataclass(frozen=True)
class ParsingConfig:
    """How feeds are parsed (``scrapy_whittle.feeds.parse_pool.ParsePool``'s arguments).

    ``parser``: ``WHITTLE_FEED_PARSER``; ``workers``: ``WHITTLE_PARSE_WORKERS`` (0 parses
    everything on the event loop); ``inline_max_bytes``: ``WHITTLE_PARSE_INLINE_MAX_BYTES``
    (None: the parser's own, 16 KiB for feedparser-rs, 8 KiB for feedparser);
    ``timeout``: ``WHITTLE_PARSE_TIMEOUT``; ``max_entries``: ``WHITTLE_MAX_FEED_ENTRIES``
    (unset: ``WHITTLE_MAX_ENTRIES_PER_SOURCE``; never more, or entries beyond the memory
    would come back as new); ``max_field_chars``: ``WHITTLE_MAX_FIELD_LENGTH``;
    ``max_bytes``: ``WHITTLE_MAX_FEED_SIZE``.
    """

    parser: str = "feedparser-rs"
    workers: int = 2
    inline_max_bytes: int | None = None
    timeout: float = 60.0
    max_entries: int = 1000
    max_field_chars: int = 2048
    max_bytes: int = 10 * 1024 * 1024

    @classmethod
    def from_settings(cls, settings, *, max_bytes: int,
                      max_entries_per_source: int) -> ParsingConfig:
        from scrapy_whittle.feeds.parsers import get_parser

        parser = settings.get("WHITTLE_FEED_PARSER", DEFAULTS["WHITTLE_FEED_PARSER"])
        try:
            get_parser(parser)
        except ValueError as exc:
            raise _fail("WHITTLE_FEED_PARSER", parser, f"is not usable: {exc}") from None
        inline = settings.get("WHITTLE_PARSE_INLINE_MAX_BYTES", None)
        if inline is not None:
            inline = _number(settings, "WHITTLE_PARSE_INLINE_MAX_BYTES", minimum=0,
                             integer=True)
        max_entries = max_entries_per_source
        if settings.get("WHITTLE_MAX_FEED_ENTRIES", None) is not None:
            max_entries = _number(settings, "WHITTLE_MAX_FEED_ENTRIES", minimum=1,
                                  integer=True)
            if max_entries > max_entries_per_source:
                raise _fail("WHITTLE_MAX_FEED_ENTRIES", max_entries,
                            f"must be <= WHITTLE_MAX_ENTRIES_PER_SOURCE "
                            f"({max_entries_per_source!r}): entries kept beyond what is "
                            "remembered would be counted as new at every crawl")
        return cls(
            parser=parser, inline_max_bytes=inline, max_entries=max_entries,
            workers=_number(settings, "WHITTLE_PARSE_WORKERS", minimum=0, integer=True),
            timeout=_number(settings, "WHITTLE_PARSE_TIMEOUT", minimum=0, strict=True),
            max_field_chars=_number(settings, "WHITTLE_MAX_FIELD_LENGTH", minimum=64,
                                    integer=True),
            max_bytes=max_bytes)

    def limits(self):
        from scrapy_whittle.feeds.parsers import ParseLimits

        return ParseLimits(max_bytes=self.max_bytes, max_entries=self.max_entries,
                           max_field_chars=self.max_field_chars)

    def make_pool(self):
        from scrapy_whittle.feeds.parse_pool import ParsePool

        return ParsePool(parser=self.parser, workers=self.workers, limits=self.limits(),
                         inline_max_bytes=self.inline_max_bytes, timeout=self.timeout)
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WhittleConfig:
    """The validated ``WHITTLE_*`` settings (one field per setting, same meaning)."""

    sources: Any = None
    sources_refresh: float = 0.0
    policy: str = "whittle"
    core_policy: str = "whittle"
    policy_options: dict[str, Any] = field(default_factory=dict)
    oracle_params: Any = None
    budget: float = 1.0
    period: float = 3600.0
    spread: bool = False
    seed: int = 0
    min_interval: float = 0.0
    backoff_base: float = 60.0
    backoff_max: float = 86400.0
    conditional_get: bool = True
    hints: bool = True
    hints_max_delay: float = 86400.0
    max_feed_size: int = 10 * 1024 * 1024
    max_entries_per_source: int = 1000
    engagement_scale: float = 1.0
    item_value: float = 1.0
    logstats_interval: float = 60.0
    state: bool = True
    half_life: float | dict[str, float] | None = None
    checkpoint_interval: float = 5.0
    max_epochs: int | None = None
    clock: Any = None
    redis_url: str | None = None
    redis_prefix: str = "whittle:{spider}"
    redis_lease: float | None = None
    redis_lock_ttl: float = 10.0
    redis_backlog: int = 256
    parsing: ParsingConfig = field(default_factory=ParsingConfig)

    @property
    def sources_url(self) -> str | None:
        """``WHITTLE_SOURCES`` when it is the http(s) URL of a list (fetched through Scrapy)."""
        from scrapy_whittle.service.sources import is_list_url

        return self.sources.strip() if is_list_url(self.sources) else None

    @classmethod
    def from_settings(cls, settings: BaseSettings | Mapping[str, Any]) -> WhittleConfig:
        sources = settings.get("WHITTLE_SOURCES", None)
        if sources is not None and not isinstance(sources, str | list | tuple):
            raise _fail("WHITTLE_SOURCES", sources,
                        "must be a file name (OPML, text or JSON) or a list of URLs")
        if isinstance(sources, str) and not sources.strip():
            sources = None
        policy = settings.get("WHITTLE_POLICY", DEFAULTS["WHITTLE_POLICY"])
        if not isinstance(policy, str) or not policy:
            raise _fail("WHITTLE_POLICY", policy, "must be a policy name")
        from scrapy_whittle.core.policies import POLICIES, canonical_name, policy_class

        core = canonical_name(policy)
        if core not in POLICIES:
            raise _fail("WHITTLE_POLICY", policy, f"must be one of: {policy_names()}")
        try:
            cls_ = policy_class(core)
        except ValueError as exc:
            raise _fail("WHITTLE_POLICY", policy, f"is not usable: {exc}") from None
        needs_parameters = cls_.needs_parameters
        options = _json_object("WHITTLE_POLICY_OPTIONS",
                               settings.get("WHITTLE_POLICY_OPTIONS", None)) or {}
        if not isinstance(options, Mapping):
            raise _fail("WHITTLE_POLICY_OPTIONS", options, "must be a dict (or its JSON text)")
        _check_options(cls_, policy, options)
        oracle = _json_object("WHITTLE_ORACLE_PARAMS", settings.get("WHITTLE_ORACLE_PARAMS", None))
        if policy == "oracle" and not oracle:
            raise _fail("WHITTLE_ORACLE_PARAMS", oracle,
                        "must name a JSON file of per-URL rate/mean_utility/decay "
                        "when WHITTLE_POLICY is 'oracle'")
        if needs_parameters and not oracle and policy != "oracle":
            raise _fail("WHITTLE_POLICY", policy,
                        "needs the sources' true parameters: set WHITTLE_ORACLE_PARAMS, or "
                        "use a policy that learns them (e.g. 'whittle')")
        if oracle is not None and not isinstance(oracle, str | Mapping):
            raise _fail("WHITTLE_ORACLE_PARAMS", oracle, "must be a file name or a dict")
        if settings.get("WHITTLE_BUDGET", None) is None:
            raise _fail("WHITTLE_BUDGET", None,
                        "must be set: crawls (cost units) allowed per WHITTLE_PERIOD seconds")
        backoff_base = _number(settings, "WHITTLE_BACKOFF_BASE", minimum=0)
        backoff_max = _number(settings, "WHITTLE_BACKOFF_MAX", minimum=0)
        if backoff_max < backoff_base:
            raise _fail("WHITTLE_BACKOFF_MAX", backoff_max,
                        f"must be >= WHITTLE_BACKOFF_BASE ({backoff_base!r})")
        max_feed_size = _number(settings, "WHITTLE_MAX_FEED_SIZE", minimum=0, strict=True,
                                integer=True)
        max_entries_per_source = _number(settings, "WHITTLE_MAX_ENTRIES_PER_SOURCE",
                                         minimum=1, integer=True)
        redis = _redis(settings)
        from scrapy_whittle.service.sources import is_list_url

        if redis["redis_url"] and is_list_url(sources):
            raise _fail("WHITTLE_SOURCES", sources,
                        "cannot be a URL in a cluster (WHITTLE_REDIS_URL) yet: every process "
                        "reads the list at start; give a file that all of them can read")
        if redis["redis_url"] and settings.get("WHITTLE_SOURCES_REFRESH", None):
            raise _fail("WHITTLE_SOURCES_REFRESH", settings.get("WHITTLE_SOURCES_REFRESH"),
                        "is not supported in a cluster (WHITTLE_REDIS_URL) yet: the list is "
                        "read when the processes start")
        return cls(
            parsing=ParsingConfig.from_settings(
                settings, max_bytes=max_feed_size,
                max_entries_per_source=max_entries_per_source),
            half_life=_half_life(settings),
            sources=list(sources) if isinstance(sources, tuple) else sources,
            sources_refresh=_number(settings, "WHITTLE_SOURCES_REFRESH", minimum=0),
            policy=policy, core_policy=core, policy_options=dict(options),
            oracle_params=oracle,
            budget=_number(settings, "WHITTLE_BUDGET", minimum=0, strict=True),
            period=_number(settings, "WHITTLE_PERIOD", minimum=0, strict=True),
            spread=_bool(settings, "WHITTLE_SPREAD"),
            seed=_number(settings, "WHITTLE_SEED", minimum=0, integer=True),
            min_interval=_number(settings, "WHITTLE_MIN_INTERVAL", minimum=0),
            backoff_base=backoff_base, backoff_max=backoff_max,
            conditional_get=_bool(settings, "WHITTLE_CONDITIONAL_GET"),
            hints=_bool(settings, "WHITTLE_HINTS"),
            hints_max_delay=_number(settings, "WHITTLE_HINTS_MAX_DELAY", minimum=0),
            max_feed_size=max_feed_size, max_entries_per_source=max_entries_per_source,
            engagement_scale=_number(settings, "WHITTLE_ENGAGEMENT_SCALE", minimum=0,
                                     strict=True),
            item_value=_number(settings, "WHITTLE_ITEM_VALUE", minimum=0),
            logstats_interval=_number(settings, "WHITTLE_LOGSTATS_INTERVAL", minimum=0),
            state=_bool(settings, "WHITTLE_STATE"),
            checkpoint_interval=_number(settings, "WHITTLE_CHECKPOINT_INTERVAL", minimum=0,
                                        strict=True),
            max_epochs=(None if settings.get("WHITTLE_MAX_EPOCHS", None) is None
                        else _number(settings, "WHITTLE_MAX_EPOCHS", minimum=1, integer=True)),
            clock=_clock(settings),
            **redis,
        )
