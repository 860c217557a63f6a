"""Every ``WHITTLE_*`` setting, once: its default, its rule and its meaning (:data:`SETTINGS`).

Everything else derives from that table: the defaults of :class:`WhittleConfig` and
:class:`ParsingConfig`, the defaults the add-on gives Scrapy (:mod:`scrapy_whittle.scrapy.addon`),
the start-up check (:mod:`scrapy_whittle.scrapy.startup`) and the settings table of
``docs/scrapy.md`` (held against this one by ``tests/service/test_config.py``).

:meth:`WhittleConfig.from_settings` reads a Scrapy ``Settings`` object or any mapping (the
module imports nothing of Scrapy, so the re-crawl service and the simulator use the same
configuration) and raises :class:`InvalidSetting` naming the setting and its value for
anything it cannot use, so a typo stops the crawl before the first request instead of an hour
into it.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from urllib.parse import unquote

from scrapy_whittle.core.policies import NEEDS_EXTRA, POLICIES, canonical_name, policy_class
from scrapy_whittle.feeds.parse_pool import PARSE_TIMEOUT
from scrapy_whittle.feeds.parsers import DEFAULT_PARSER, ParseLimits, get_parser
from scrapy_whittle.service.invalid_setting import InvalidSetting
from scrapy_whittle.service.policy_options import (
    check_option_names,
    policy_names,
)
from scrapy_whittle.service.sources.registry import is_list_url

# Settings are read through ``Mapping.get`` alone: Scrapy's ``Settings`` is a Mapping, and so is
# the plain dict the simulator and the tests pass, so the service needs no Scrapy import.
__all__ = ["DEFAULTS", "REQUIRED", "SETTINGS", "ArticlesConfig", "InvalidSetting",
           "ParsingConfig", "Setting", "WhittleConfig", "check_setting_names",
           "download_slot_delays", "policy_names", "require_extra"]


class _Required:
    """The default of a setting a crawl cannot do without."""

    def __repr__(self) -> str:
        return "required"


REQUIRED: Any = _Required()

#: a rule reads a setting's given value (its name, the value) into the value used, or raises
#: InvalidSetting naming both
Rule = Callable[[str, Any], Any]


@dataclass(frozen=True)
class Setting:
    """One ``WHITTLE_*`` setting: its name, what a project that leaves it unset gets, the
    rule its value must follow, and its meaning (one line of the docs' table)."""

    name: str
    default: Any
    rule: Rule
    doc: str
    #: another setting read when this one is unset (``REDIS_URL``, shared with other plugins)
    fallback: str | None = None

    def read(self, settings: Mapping[str, Any]) -> Any:
        raw = settings.get(self.name, None)
        if raw in (None, "") and self.fallback is not None:
            raw = settings.get(self.fallback, None)
        if raw is None:
            raw = None if self.default is REQUIRED else self.default
        return self.rule(self.name, raw)


def _fail(name: str, value: Any, why: str) -> InvalidSetting:
    return InvalidSetting(f"{name} ({value!r}) {why}")


# -- rules ------------------------------------------------------------------------------------
def number(*, minimum: float | None = None, strict: bool = False, integer: bool = False,
           optional: bool = False) -> Rule:
    """A finite number (text too: ``scrapy crawl -s`` gives every value as a string), above
    ``minimum`` (or at it, unless ``strict``); with ``optional``, None stands for "unset"."""

    def rule(name: str, raw: Any) -> float | int | None:
        if raw is None and optional:
            return None
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

    return rule


def _required_number(name: str, raw: Any) -> float:
    if raw is None:
        raise _fail(name, None, "must be set: crawls (cost units) allowed per WHITTLE_PERIOD "
                    "seconds")
    return number(minimum=0, strict=True)(name, raw)


def boolean(name: str, raw: Any) -> bool:
    """True or False, 1 or 0, or their text (``-s WHITTLE_STATE=false``)."""
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int | float) and raw in (0, 1):
        return bool(raw)
    if isinstance(raw, str) and raw.strip().lower() in ("1", "0", "true", "false", "yes", "no"):
        return raw.strip().lower() in ("1", "true", "yes")
    raise _fail(name, raw, "must be a boolean")


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


def _sources(name: str, raw: Any) -> str | list | None:
    if raw is not None and not isinstance(raw, str | list | tuple):
        raise _fail(name, raw, "must be a file name (OPML, text or JSON) or a list of URLs")
    if isinstance(raw, str) and not raw.strip():
        return None
    return list(raw) if isinstance(raw, tuple) else raw


def require_extra(module: str, extra: str, setting: str, value: Any) -> None:
    """Refuse ``setting``'s ``value`` when it needs ``module``, an optional dependency that is
    not installed, naming the extra of scrapy-whittle that installs it. Looked up, not
    imported: the check costs nothing to a crawl that has the package."""
    if importlib.util.find_spec(module) is None:
        raise _fail(setting, value, f"needs the package {module!r}, which is not installed: "
                    f"pip install 'scrapy-whittle[{extra}]'")


def _policy(name: str, raw: Any) -> str:
    if not isinstance(raw, str) or not raw:
        raise _fail(name, raw, "must be a policy name")
    core = canonical_name(raw)
    if core not in POLICIES:
        raise _fail(name, raw, f"must be one of: {policy_names()}")
    if core in NEEDS_EXTRA:
        require_extra(*NEEDS_EXTRA[core], name, raw)
    try:
        policy_class(core)
    except ValueError as exc:
        raise _fail(name, raw, f"is not usable: {exc}") from None
    return raw


def _articles(name: str, raw: Any) -> bool:
    on = boolean(name, raw)
    if on:
        require_extra("trafilatura", "articles", name, raw)
    return on


def _near_duplicates(name: str, raw: Any) -> float:
    value = number(minimum=0)(name, raw)
    if value and not 0.5 <= value <= 1:
        raise _fail(name, raw, "must be 0 (off) or a similarity from 0.5 to 1")
    return value


def _options(name: str, raw: Any) -> dict[str, Any]:
    options = _json_object(name, raw)
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise _fail(name, options, "must be a dict (or its JSON text)")
    return dict(options)


def _oracle(name: str, raw: Any) -> str | Mapping | None:
    oracle = _json_object(name, raw)
    if oracle is not None and not isinstance(oracle, str | Mapping):
        raise _fail(name, oracle, "must be a file name or a dict")
    return oracle


def _feed_parser(name: str, raw: Any) -> str:
    try:
        get_parser(raw)
    except ValueError as exc:
        raise _fail(name, raw, f"is not usable: {exc}") from None
    return raw


def _clock(name: str, raw: Any) -> Any:
    if raw is not None and not (callable(getattr(raw, "now", None))
                                and callable(getattr(raw, "wait", None))):
        raise _fail(name, raw, "must be a clock object with now() and wait() "
                    "(scrapy_whittle.service.clock.SimulatedClock), or None for the system clock")
    return raw


#: the URL schemes of a Redis Cluster (``WHITTLE_REDIS_URL``)
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")


class ClusterAddress(NamedTuple):
    """A ``redis+cluster://`` URL read: its start-up nodes and credentials."""

    nodes: list[tuple[str, int]]
    username: str | None
    password: str | None
    ssl: bool


def is_cluster(url: str) -> bool:
    return url.split("://", 1)[0] in CLUSTER_SCHEMES


def cluster_address(url: str) -> ClusterAddress:
    """Read ``[user:password@]host:port[,host:port...][/0]``; ValueError saying what is
    wrong (a cluster has database 0 only)."""
    scheme, _, rest = url.partition("://")
    netloc, _, path = rest.partition("/")
    path = path.split("?", 1)[0]
    if path not in ("", "0"):
        raise ValueError(f"a Redis Cluster has database 0 only, not {path!r}")
    username = password = None
    if "@" in netloc:
        auth, netloc = netloc.rsplit("@", 1)
        user, colon, secret = auth.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    nodes = []
    for node in netloc.split(","):
        host, colon, port = node.strip().rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{node!r} is not host:port")
        nodes.append((host.strip("[]"), int(port)))
    return ClusterAddress(nodes, username, password, scheme == "rediss+cluster")


def _redis_url(name: str, raw: Any) -> str | None:
    if not raw:
        return None
    if not (isinstance(raw, str)
            and raw.split("://")[0] in ("redis", "rediss", "unix", *CLUSTER_SCHEMES)):
        raise _fail(name, raw, "must be a redis://, rediss:// or unix:// URL, or a Redis "
                    "Cluster's redis+cluster://host:port[,host:port...]")
    if is_cluster(raw):
        try:
            cluster_address(raw)
        except ValueError as exc:
            raise _fail(name, _masked(raw), f"is not a usable Redis Cluster URL: {exc}") \
                from None
    return raw


def _masked(url: str) -> str:
    """``url`` with the password of its ``user:password@`` masked."""
    scheme, sep, rest = url.partition("://")
    if "@" not in rest.split("/", 1)[0]:
        return url
    auth, at, tail = rest.partition("@")
    user = auth.split(":", 1)[0]
    return f"{scheme}{sep}{user}:***{at}{tail}"


def _text(name: str, raw: Any) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise _fail(name, raw, "must be a non-empty string")
    return raw


DEDUP_MODES = ("link", "entry")


def _dedup(name: str, raw: Any) -> str:
    if not isinstance(raw, str) or raw.strip().lower() not in DEDUP_MODES:
        raise _fail(name, raw, f"must be one of {', '.join(map(repr, DEDUP_MODES))}")
    return raw.strip().lower()


def _names(name: str, raw: Any) -> tuple[str, ...] | None:
    """A list of query parameter names (text: comma-separated, or a JSON list); None: the
    default list."""
    if raw is None:
        return None
    if isinstance(raw, str):
        text = raw.strip()
        if text.startswith("["):
            try:
                raw = json.loads(text)
            except json.JSONDecodeError as exc:
                raise _fail(name, text, f"is not valid JSON: {exc}") from None
        else:
            raw = text.split(",")
    if not isinstance(raw, list | tuple) or not all(isinstance(n, str) for n in raw):
        raise _fail(name, raw, "must be a list of query parameter names (`utm_*`: a prefix)")
    return tuple(n.strip() for n in raw if n.strip())


def _half_life(name: str, raw: Any) -> float | dict[str, float] | None:
    raw = _json_object(name, raw)
    if raw is None:
        return None

    def seconds(key: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise _fail(key, value, "must be a number of seconds > 0")
        try:
            result = float(value)
        except ValueError:
            raise _fail(key, value, "must be a number of seconds > 0") from None
        if not (math.isfinite(result) and result > 0):
            raise _fail(key, value, "must be a number of seconds > 0")
        return result

    if isinstance(raw, Mapping):
        return {str(k): seconds(f"{name}[{k!r}]", v) for k, v in raw.items()}
    return seconds(name, raw)


def _latency_factor(name: str, raw: Any) -> float:
    """0 (latency not watched) or a finite number > 1."""
    value = number(minimum=0)(name, raw)
    if 0 < value <= 1:
        raise _fail(name, raw, "must be 0 (off) or a number > 1")
    return float(value)


def _host_limits(name: str, raw: Any) -> dict[str, float] | None:
    """host -> crawls per epoch (a number > 0, fractions too: 0.5 is one crawl every other
    epoch), or its JSON text; None or empty: no host has a limit."""
    raw = _json_object(name, raw)
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    if not isinstance(raw, Mapping):
        raise _fail(name, raw, "must be a dict of host: crawls per epoch (or its JSON text)")
    limits = {}
    for host, value in raw.items():
        key = f"{name}[{host!r}]"
        if not isinstance(host, str) or not host.strip():
            raise _fail(name, raw, f"has a key {host!r} that is not a host name")
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise _fail(key, value, "must be a number of crawls per epoch > 0")
        try:
            limit = float(value)
        except ValueError:
            raise _fail(key, value, "must be a number of crawls per epoch > 0") from None
        if not (math.isfinite(limit) and limit > 0):
            raise _fail(key, value, "must be a number of crawls per epoch > 0")
        limits[host.strip().lower()] = limit
    return limits or None


def _callback_url(name: str, raw: Any) -> str | None:
    """The public http(s) URL of the WebSub callback (None or empty: off)."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    from urllib.parse import urlsplit

    text = raw.strip() if isinstance(raw, str) else raw
    parts = urlsplit(text) if isinstance(text, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname \
            or parts.query or parts.fragment:
        raise _fail(name, raw, "must be the public http(s) URL the hubs POST to, without a "
                    "query or fragment (e.g. 'https://crawler.example.com/websub')")
    return text.rstrip("/")


def _listen(name: str, raw: Any) -> tuple[str, int] | None:
    """``host:port`` the WebSub callback server listens on (None or empty: off)."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    why = "must be host:port, the local address the WebSub callback listens on " \
          "(e.g. '0.0.0.0:8080'; port 0 to 65535)"
    if not isinstance(raw, str):
        raise _fail(name, raw, why)
    host, sep, port = raw.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise _fail(name, raw, why)
    return host, int(port)


def _prometheus(name: str, raw: Any) -> tuple[str, int] | None:
    """A port on 127.0.0.1 (0: any free one), or ``host:port``; None or empty: off. Needs
    prometheus-client (the ``monitoring`` extra)."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    if isinstance(raw, str) and ":" in raw:
        listen = _listen(name, raw)
    else:
        listen = ("127.0.0.1", number(minimum=0, integer=True)(name, raw))
        if listen[1] > 65535:
            raise _fail(name, raw, "must be a port (0 to 65535) or host:port")
    require_extra("prometheus_client", "monitoring", name, raw)
    return listen


# -- the table ---------------------------------------------------------------------------------
# The feed limits' defaults are the feed parsers' own, so a feed parsed outside a crawl obeys
# the same limits as one parsed in it.
_LIMITS = ParseLimits()

#: Every WHITTLE_* setting, in the order of the docs' table.
SETTINGS: tuple[Setting, ...] = (
    Setting("WHITTLE_SOURCES", None, _sources,
            "OPML (`.opml`/`.xml`), JSON (`.json`: list of URLs or of `{url, weight, "
            "min_interval}`) or text file (one URL a line, `#` comments), the http(s) URL of "
            "such a list (fetched through Scrapy), or a list of URLs"),
    Setting("WHITTLE_SOURCES_REFRESH", 0.0, number(minimum=0),
            "seconds between two reads of the source list (file or URL); 0: read once, at "
            "start"),
    Setting("WHITTLE_SITE_SEARCH", True, boolean,
            "a source whose first answer is an HTML page is a site's address: its feeds and "
            "news sitemaps are found (its page's `<link rel=\"alternate\">`, `Link` headers, "
            "robots.txt `Sitemap:` lines, the usual paths) and crawled in its place "
            "([sites.md](sites.md)); `False`: such a page is the error `not_a_feed`"),
    Setting("WHITTLE_POLICY", "whittle", _policy,
            "`\"whittle\"`: Whittle index on estimated parameters; "
            "`\"oracle\"`: Whittle index on given parameters (`WHITTLE_ORACLE_PARAMS`); or any "
            "core policy name: `round_robin`, `uniform`, `greedy`, `thompson`, `dqn`, "
            "`nutch`, `miniflux`, `newsblur`, `commafeed`, `stormcrawler`, `fixed-interval`, "
            "... ([models.md](models.md))"),
    Setting("WHITTLE_POLICY_OPTIONS", {}, _options,
            "keyword arguments of the policy's constructor (e.g. `{\"day\": 86400}` for "
            "`diurnal-whittle`, which learns each feed's daily rhythm: "
            "[diurnal.md](diurnal.md))"),
    Setting("WHITTLE_ORACLE_PARAMS", None, _oracle,
            "for `\"oracle\"`: JSON file (or dict) of per-URL `rate`, `mean_utility`, "
            "`decay`, rates per second (the `/params.json` of `sim.serve`)"),
    Setting("WHITTLE_BUDGET", REQUIRED, _required_number,
            "M, crawls (cost units) per epoch, > 0"),
    Setting("WHITTLE_PERIOD", 3600.0, number(minimum=0, strict=True),
            "T, epoch length in seconds, > 0"),
    Setting("WHITTLE_STEP", None, number(minimum=0, strict=True, optional=True),
            "seconds between two decisions of the policy: each step plans the share of the "
            "budget due by its end (what earlier steps left unspent included), so crawls leave "
            "paced and any source may be chosen at any step. Rounded down to divide "
            "`WHITTLE_PERIOD`. Unset: a decision a minute, or one per crawl the budget allows "
            "where it allows fewer (`WHITTLE_PERIOD` / `WHITTLE_BUDGET` seconds), at most "
            "one an epoch; `WHITTLE_PERIOD`: one plan an epoch, its crawls leaving at its "
            "start"),
    Setting("WHITTLE_SPREAD", False, boolean,
            "spread an epoch's crawls evenly over the epoch instead of starting them at once"),
    Setting("WHITTLE_DISCOVERY", False, boolean,
            "fetch every source never fetched once, outside the budget, spread over the epoch "
            "after it joined (at the first start, and when the list or a spider adds "
            "sources), as a feed reader fetches a feed on subscribe; stat "
            "`whittle/discovery/crawls`. Off by default: the budget is the politeness limit "
            "you set, the sweep costs one extra request per source, once, and the learned "
            "policies price unfetched sources without it"),
    Setting("WHITTLE_SEED", 0, number(minimum=0, integer=True),
            "seed of the policy's random generator"),
    Setting("WHITTLE_MAX_INTERVAL", None, number(minimum=0, optional=True),
            "the longest a source waits between two crawls, in seconds, for the index "
            "policies (`whittle`, `diurnal-whittle`, `oracle`): one that waited that long is "
            "crawled first, within its hints and its host's allowance. Default (None): 24 "
            "`WHITTLE_PERIOD`s, a day "
            "with hourly periods, as feed readers cap their intervals, or 8 times the time the "
            "budget takes to crawl every source once where that is longer (a limit the budget "
            "cannot keep would make the crawl a round-robin); 0: no limit. Its cost: the "
            "budget it takes from the sources the index prefers ([budget.md](budget.md))"),
    Setting("WHITTLE_MIN_INTERVAL", 0.0, number(minimum=0),
            "seconds between two crawls of the same source (all sources; OPML `minInterval` "
            "per source)"),
    Setting("WHITTLE_HOST_LIMITS", None, _host_limits,
            "crawls per epoch each listed host allows, all its sources together: a dict "
            "`{host: crawls}` (a fraction: one crawl every few epochs) or its JSON text. A "
            "host's delay (`Crawl-delay`, `DOWNLOAD_SLOTS`, `DOWNLOAD_DELAY`) of d s allows "
            "floor(T / d); the lesser holds. The "
            "budget a host cannot take goes to other hosts; a host that answers 429 or 503 "
            "(or a burst of 403s) is throttled below its limit, listed or not "
            "(see \"Hosts that limit crawlers\")"),
    Setting("WHITTLE_HOST_LATENCY_FACTOR", 2.0, _latency_factor,
            "a host whose answers, from several of its feeds, take more than this multiple "
            "of its usual time (and a second more) is throttled as if it answered 429; `0`: "
            "latency is not watched (a crawl whose own link is the bottleneck)"),
    Setting("WHITTLE_BACKOFF_BASE", 60.0, number(minimum=0),
            "seconds of back-off after a first failure, doubling after each further one"),
    Setting("WHITTLE_BACKOFF_MAX", 86400.0, number(minimum=0),
            "cap of the back-off, >= `WHITTLE_BACKOFF_BASE`"),
    Setting("WHITTLE_RETIRE_AFTER", 180 * 86400.0, number(minimum=0),
            "seconds without a new entry after which a source whose feed still answers "
            "retires (only probed, outside the budget); `0`: never"),
    Setting("WHITTLE_RETIRE_404_AFTER", 30 * 86400.0, number(minimum=0),
            "a source answering 404 three times in a row retires once it has had no new "
            "entry for this many seconds; `0`: never (a 410 retires a source at once)"),
    Setting("WHITTLE_RETIRE_PROBE", 7 * 86400.0, number(minimum=0, strict=True),
            "seconds between two probes of a retired source, outside the budget (stat "
            "`whittle/probes/crawls`); a probe finding new entries brings it back, > 0"),
    Setting("WHITTLE_SITEMAP_CHILD_MISSES", 3, number(minimum=0, integer=True),
            "a child sitemap that its sitemap index has not listed in this many of the "
            "index's fetches in a row retires (stat `whittle/sources/unlisted`); listed "
            "again, it comes back; `0`: never for this"),
    Setting("WHITTLE_SITEMAP_CHILD_MAX_AGE", 7 * 86400.0, number(minimum=0),
            "a child sitemap whose index last listed it more than this many seconds ago "
            "retires at the index's next fetch, whatever the misses; `0`: never for this"),
    Setting("WHITTLE_CONDITIONAL_GET", True, boolean,
            "send `If-None-Match` / `If-Modified-Since`"),
    Setting("WHITTLE_HINTS", True, boolean,
            "honour `Retry-After`, `max-age`/`Expires`, `<ttl>`, `<skipHours>`/`<skipDays>`; "
            "`sy:updateFrequency` as a prior"),
    Setting("WHITTLE_HINTS_MAX_DELAY", 86400.0, number(minimum=0),
            "cap (s) of any \"not before\" a server or feed asks"),
    Setting("WHITTLE_MAX_FEED_SIZE", _LIMITS.max_bytes,
            number(minimum=0, strict=True, integer=True),
            "bytes; a larger body, announced, received or inflated, is the error `too_large` "
            "(Scrapy's `download_maxsize` of feed requests)"),
    Setting("WHITTLE_MAX_ENTRIES_PER_SOURCE", _LIMITS.max_entries, number(minimum=1, integer=True),
            "entries read from one feed and remembered per source, at most (a source "
            "remembers as many as its feed shows, plus an eighth (at least 4))"),
    Setting("WHITTLE_FEED_PARSER", DEFAULT_PARSER, _feed_parser,
            "`\"feedparser-rs\"` (Rust) or `\"feedparser\"` (the Universal Feed Parser); what "
            "the first cannot read goes to feedparser ([parsing.md](parsing.md))"),
    Setting("WHITTLE_PARSE_WORKERS", 2, number(minimum=0, integer=True),
            "worker processes parsing feeds off the reactor thread; `0`: everything on it"),
    Setting("WHITTLE_PARSE_INLINE_MAX_BYTES", None,
            number(minimum=0, integer=True, optional=True),
            "bodies up to this size are parsed on the reactor thread (None: the parser's "
            "own, 16 KiB for feedparser-rs, 8 KiB for feedparser)"),
    Setting("WHITTLE_PARSE_TIMEOUT", PARSE_TIMEOUT, number(minimum=0, strict=True),
            "seconds a worker may spend on one feed (error `parse_failed`)"),
    Setting("WHITTLE_MAX_FEED_ENTRIES", None, number(minimum=1, integer=True, optional=True),
            "entries kept per feed, the first in feed order, <= "
            "`WHITTLE_MAX_ENTRIES_PER_SOURCE` (None: `WHITTLE_MAX_ENTRIES_PER_SOURCE`)"),
    Setting("WHITTLE_MAX_FIELD_LENGTH", _LIMITS.max_field_chars,
            number(minimum=64, integer=True),
            "characters of a title (cut), link (dropped) or id (hashed), >= 64"),
    Setting("WHITTLE_DEDUP", "link", _dedup,
            "what makes an entry new: `\"link\"`, a story not seen in any feed (its "
            "normalised link, or its id where that is a URL: [parsing.md](parsing.md)); a "
            "repeat makes no item and is worth nothing to the policy; stat "
            "`whittle/dedup/repeats`. `\"entry\"`: an entry not seen in its own feed"),
    Setting("WHITTLE_DEDUP_DROP_PARAMS", None, _names,
            "query parameters a link's story key leaves out (names; `utm_*`: every name with "
            "that prefix); None: the tracking parameters listed in [parsing.md](parsing.md)"),
    Setting("WHITTLE_ARTICLES", False, _articles,
            "fetch each new entry's page through Scrapy and extract its article into the "
            "item (`text`, `authors`, `language`, ...; the extra `articles`): outside "
            "`WHITTLE_BUDGET`, within its host's allowance ([articles.md](articles.md))"),
    Setting("WHITTLE_ARTICLE_HOST_LIMIT", None, number(minimum=0, strict=True, optional=True),
            "article requests per host and `WHITTLE_PERIOD` at most, within what the host's "
            "allowance leaves its feeds (None: all that it leaves)"),
    Setting("WHITTLE_ARTICLE_MAX_SIZE", 5 * 1024 * 1024, number(minimum=1024, integer=True),
            "bytes of an article page at most (Scrapy's `download_maxsize` for its request)"),
    Setting("WHITTLE_NEAR_DUPLICATES", 0.0, _near_duplicates,
            "with `WHITTLE_ARTICLES`: an article whose text is this similar (0.5-1, share of "
            "fingerprint bits; 0.8 tells a wire copy) to one seen before is a repeat of its "
            "story; 0: off ([articles.md](articles.md))"),
    Setting("WHITTLE_ENGAGEMENT_SCALE", 1.0, number(minimum=0, strict=True),
            "value of an entry = engagement / scale: how engagement compares with "
            "`WHITTLE_ITEM_VALUE`, the value of an entry without it. Where every feed shows "
            "engagement the scale changes no choice: the learned policy's value prior follows "
            "the unit its values come in ([estimators.md](estimators.md), ValueEstimator)"),
    Setting("WHITTLE_ITEM_VALUE", 1.0, number(minimum=0),
            "value of an entry without engagement (times the source's weight)"),
    Setting("WHITTLE_LOGSTATS_INTERVAL", 60.0, number(minimum=0),
            "seconds between progress lines; 0 disables"),
    Setting("WHITTLE_STATE", True, boolean,
            "keep the crawl's state in `JOBDIR/whittle.sqlite`"),
    Setting("WHITTLE_CHECKPOINT_INTERVAL", 5.0, number(minimum=0, strict=True),
            "seconds between two checkpoints of the state, > 0"),
    Setting("WHITTLE_TRACE_DAYS", 30.0, number(minimum=0),
            "days of publication times the state keeps for `scrapy whittle trace` (older "
            "ones are deleted at each checkpoint); `0`: none kept"),
    Setting("WHITTLE_MAX_EPOCHS", None, number(minimum=1, integer=True, optional=True),
            "end the crawl after this many epochs (>= 1); unset: never"),
    Setting("WHITTLE_CLOCK", None, _clock,
            "a clock object (`scrapy_whittle.service.clock.SimulatedClock` for simulations); "
            "unset: the wall clock"),
    Setting("WHITTLE_REDIS_URL", None, _redis_url,
            "`redis://host:port/db`, or a Redis Cluster's `redis+cluster://host:port[,host:port"
            "...]` (else `REDIS_URL`): every process with the same URL and "
            "prefix shares one crawl ([cluster.md](cluster.md))", fallback="REDIS_URL"),
    Setting("WHITTLE_REDIS_PREFIX", "whittle:{spider}", _text,
            "prefix of the crawl's Redis keys (`{spider}`: the spider's name)"),
    Setting("WHITTLE_REDIS_LEASE", None, number(minimum=0, strict=True, optional=True),
            "seconds a worker may hold a crawl before it is handed out again; unset: "
            "`DOWNLOAD_TIMEOUT` x (retries + 2) + 60"),
    Setting("WHITTLE_REDIS_LOCK_TTL", 10.0, number(minimum=0, strict=True),
            "seconds the planner's lock lives without renewal: how soon another process "
            "takes over"),
    Setting("WHITTLE_REDIS_BACKLOG", 256, number(minimum=1, integer=True),
            "crawls in flight across the cluster, at most"),
    Setting("WHITTLE_REDIS_STANDBY", False, boolean,
            "keep the planner's state warm in this process while another plans (a second "
            "copy: about 1 KB a source), so that it takes over within the lock's TTL at "
            "millions of sources; set it in one or two processes"),
    Setting("WHITTLE_REDIS_WAIT", 10.0, number(minimum=0, strict=True),
            "seconds a process waits for an unreachable Redis: at start-up, before the crawl "
            "stops with an error; mid-crawl, before a fetch waiting to report is dropped (the "
            "crawl is handed out again after its lease)"),
    Setting("WHITTLE_WEBSUB_CALLBACK", None, _callback_url,
            "public http(s) URL of this crawl's WebSub callback (hubs POST there; each "
            "subscription gets a path below it); with `WHITTLE_WEBSUB_LISTEN`, sources whose "
            "feed names a hub are subscribed to it (docs/push.md). Unset: no WebSub"),
    Setting("WHITTLE_WEBSUB_LISTEN", None, _listen,
            "`host:port` the WebSub callback server listens on, in the crawl's process "
            "(in a cluster crawl: in each process; behind `WHITTLE_WEBSUB_CALLBACK`). "
            "Unset: no WebSub"),
    Setting("WHITTLE_WEBSUB_LEASE", 864000.0, number(minimum=60),
            "lease asked of the hubs, seconds (the hub decides; renewed with a tenth left)"),
    Setting("WHITTLE_PROMETHEUS_PORT", None, _prometheus,
            "port on 127.0.0.1 (or `host:port`; 0: any free one) where the crawl's `whittle/*` "
            "stats are served to Prometheus (`/metrics`; the `monitoring` extra, "
            "[deploy.md](deploy.md)). Unset: none"),
    Setting("WHITTLE_HALF_LIFE", None, _half_life,
            "prior half-life of readers' interest, seconds: a number for every source, or a "
            "dict `{url or category: seconds, \"*\": fallback}`; a source's category is its "
            "OPML `category` attribute, else its OPML folder, or `category` in a JSON list. "
            "Unset: four epochs. Learning policies start from it and update it from "
            "engagement and `report_value`"),
)

#: the prefix of every name in the table: any other setting with it is a typo
PREFIX = "WHITTLE_"

#: the settings by name
SETTING: dict[str, Setting] = {s.name: s for s in SETTINGS}

#: what a project that sets nothing gets (``REQUIRED`` for a setting it must give)
DEFAULTS: dict[str, Any] = {s.name: s.default for s in SETTINGS}


# -- download slots ----------------------------------------------------------------------------
def download_slot_delays(settings: Mapping[str, Any]) -> dict[str, float]:
    """The hosts Scrapy's ``DOWNLOAD_SLOTS`` gives a delay of their own: host -> seconds.

    A slot without ``"delay"`` waits ``DOWNLOAD_DELAY`` like any other host (so Scrapy's
    downloader does), and is left out. The service prices these delays in the cost of the
    host's sources; the start-up check counts them against the budget."""
    raw = settings.get("DOWNLOAD_SLOTS", None)
    slots = _json_object("DOWNLOAD_SLOTS", raw) or {}
    if not isinstance(slots, Mapping):
        raise _fail("DOWNLOAD_SLOTS", raw, "must be a dict of host: {\"delay\": seconds, ...}")
    delays = {}
    for host, slot in slots.items():
        if not isinstance(slot, Mapping) or slot.get("delay") is None:
            continue
        delays[str(host)] = number(minimum=0)(f"DOWNLOAD_SLOTS[{host!r}]['delay']",
                                              slot["delay"])
    return delays


# -- feed parsing ------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class ParsingConfig:
    """How feeds are parsed (``scrapy_whittle.feeds.parse_pool.ParsePool``'s arguments).

    ``parser``: ``WHITTLE_FEED_PARSER``; ``workers``: ``WHITTLE_PARSE_WORKERS``;
    ``inline_max_bytes``: ``WHITTLE_PARSE_INLINE_MAX_BYTES``; ``timeout``:
    ``WHITTLE_PARSE_TIMEOUT``; ``max_entries``: ``WHITTLE_MAX_FEED_ENTRIES``, else
    ``WHITTLE_MAX_ENTRIES_PER_SOURCE`` (never more, or entries beyond the memory would come
    back as new); ``max_field_chars``: ``WHITTLE_MAX_FIELD_LENGTH``; ``max_bytes``:
    ``WHITTLE_MAX_FEED_SIZE``.
    """

    parser: str = DEFAULTS["WHITTLE_FEED_PARSER"]
    workers: int = DEFAULTS["WHITTLE_PARSE_WORKERS"]
    inline_max_bytes: int | None = DEFAULTS["WHITTLE_PARSE_INLINE_MAX_BYTES"]
    timeout: float = DEFAULTS["WHITTLE_PARSE_TIMEOUT"]
    max_entries: int = DEFAULTS["WHITTLE_MAX_ENTRIES_PER_SOURCE"]
    max_field_chars: int = DEFAULTS["WHITTLE_MAX_FIELD_LENGTH"]
    max_bytes: int = DEFAULTS["WHITTLE_MAX_FEED_SIZE"]

    def limits(self):
        return ParseLimits(max_bytes=self.max_bytes, max_entries=self.max_entries,
                           max_field_chars=self.max_field_chars)

    def make_pool(self):
        from scrapy_whittle.feeds.parse_pool import ParsePool

        return ParsePool(parser=self.parser, workers=self.workers, limits=self.limits(),
                         inline_max_bytes=self.inline_max_bytes, timeout=self.timeout)


# -- full articles -----------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class ArticlesConfig:
    """``WHITTLE_ARTICLES`` (``enabled``), ``WHITTLE_ARTICLE_HOST_LIMIT`` (``host_limit``),
    ``WHITTLE_ARTICLE_MAX_SIZE`` (``max_size``), ``WHITTLE_NEAR_DUPLICATES``
    (``near_duplicates``): :mod:`scrapy_whittle.scrapy.articles`."""

    enabled: bool = DEFAULTS["WHITTLE_ARTICLES"]
    host_limit: float | None = DEFAULTS["WHITTLE_ARTICLE_HOST_LIMIT"]
    max_size: int = DEFAULTS["WHITTLE_ARTICLE_MAX_SIZE"]
    near_duplicates: float = DEFAULTS["WHITTLE_NEAR_DUPLICATES"]


# -- all settings ------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class WhittleConfig:
    """The validated ``WHITTLE_*`` settings (one field per setting, same meaning; the
    parsing settings in ``parsing``). ``budget`` has no default: a crawl must give it."""

    budget: float
    sources: Any = DEFAULTS["WHITTLE_SOURCES"]
    sources_refresh: float = DEFAULTS["WHITTLE_SOURCES_REFRESH"]
    policy: str = DEFAULTS["WHITTLE_POLICY"]
    #: the core registry's name of ``policy`` (the same but for aliases)
    core_policy: str = canonical_name(DEFAULTS["WHITTLE_POLICY"])
    policy_options: dict[str, Any] = field(
        default_factory=lambda: dict(DEFAULTS["WHITTLE_POLICY_OPTIONS"]))
    oracle_params: Any = DEFAULTS["WHITTLE_ORACLE_PARAMS"]
    period: float = DEFAULTS["WHITTLE_PERIOD"]
    step: float | None = DEFAULTS["WHITTLE_STEP"]
    spread: bool = DEFAULTS["WHITTLE_SPREAD"]
    discovery: bool = DEFAULTS["WHITTLE_DISCOVERY"]
    site_search: bool = DEFAULTS["WHITTLE_SITE_SEARCH"]
    seed: int = DEFAULTS["WHITTLE_SEED"]
    min_interval: float = DEFAULTS["WHITTLE_MIN_INTERVAL"]
    max_interval: float | None = DEFAULTS["WHITTLE_MAX_INTERVAL"]
    host_limits: dict[str, float] | None = DEFAULTS["WHITTLE_HOST_LIMITS"]
    host_latency_factor: float = DEFAULTS["WHITTLE_HOST_LATENCY_FACTOR"]
    backoff_base: float = DEFAULTS["WHITTLE_BACKOFF_BASE"]
    backoff_max: float = DEFAULTS["WHITTLE_BACKOFF_MAX"]
    retire_after: float = DEFAULTS["WHITTLE_RETIRE_AFTER"]
    retire_404_after: float = DEFAULTS["WHITTLE_RETIRE_404_AFTER"]
    retire_probe: float = DEFAULTS["WHITTLE_RETIRE_PROBE"]
    sitemap_child_misses: int = DEFAULTS["WHITTLE_SITEMAP_CHILD_MISSES"]
    sitemap_child_max_age: float = DEFAULTS["WHITTLE_SITEMAP_CHILD_MAX_AGE"]
    conditional_get: bool = DEFAULTS["WHITTLE_CONDITIONAL_GET"]
    hints: bool = DEFAULTS["WHITTLE_HINTS"]
    hints_max_delay: float = DEFAULTS["WHITTLE_HINTS_MAX_DELAY"]
    max_feed_size: int = DEFAULTS["WHITTLE_MAX_FEED_SIZE"]
    max_entries_per_source: int = DEFAULTS["WHITTLE_MAX_ENTRIES_PER_SOURCE"]
    dedup: str = DEFAULTS["WHITTLE_DEDUP"]
    dedup_drop_params: tuple[str, ...] | None = DEFAULTS["WHITTLE_DEDUP_DROP_PARAMS"]
    engagement_scale: float = DEFAULTS["WHITTLE_ENGAGEMENT_SCALE"]
    item_value: float = DEFAULTS["WHITTLE_ITEM_VALUE"]
    logstats_interval: float = DEFAULTS["WHITTLE_LOGSTATS_INTERVAL"]
    state: bool = DEFAULTS["WHITTLE_STATE"]
    half_life: float | dict[str, float] | None = DEFAULTS["WHITTLE_HALF_LIFE"]
    checkpoint_interval: float = DEFAULTS["WHITTLE_CHECKPOINT_INTERVAL"]
    trace_days: float = DEFAULTS["WHITTLE_TRACE_DAYS"]
    max_epochs: int | None = DEFAULTS["WHITTLE_MAX_EPOCHS"]
    clock: Any = DEFAULTS["WHITTLE_CLOCK"]
    redis_url: str | None = DEFAULTS["WHITTLE_REDIS_URL"]
    redis_prefix: str = DEFAULTS["WHITTLE_REDIS_PREFIX"]
    redis_lease: float | None = DEFAULTS["WHITTLE_REDIS_LEASE"]
    redis_lock_ttl: float = DEFAULTS["WHITTLE_REDIS_LOCK_TTL"]
    redis_backlog: int = DEFAULTS["WHITTLE_REDIS_BACKLOG"]
    redis_standby: bool = DEFAULTS["WHITTLE_REDIS_STANDBY"]
    redis_wait: float = DEFAULTS["WHITTLE_REDIS_WAIT"]
    websub_callback: str | None = DEFAULTS["WHITTLE_WEBSUB_CALLBACK"]
    websub_listen: tuple[str, int] | None = DEFAULTS["WHITTLE_WEBSUB_LISTEN"]
    websub_lease: float = DEFAULTS["WHITTLE_WEBSUB_LEASE"]
    prometheus_listen: tuple[str, int] | None = DEFAULTS["WHITTLE_PROMETHEUS_PORT"]
    parsing: ParsingConfig = field(default_factory=ParsingConfig)
    articles: ArticlesConfig = field(default_factory=ArticlesConfig)

    @property
    def steps_per_epoch(self) -> int:
        """The policy's decisions in an epoch: ``WHITTLE_PERIOD`` / ``WHITTLE_STEP``, rounded
        up (so that a step is never longer than the setting asks)."""
        step = self.decision_step
        if step >= self.period:
            return 1
        return max(1, math.ceil(self.period / step - 1e-9))

    @property
    def decision_step(self) -> float:
        """``WHITTLE_STEP`` in seconds, its default resolved (``auto_step``)."""
        return auto_step(self.period, self.budget) if self.step is None else self.step

    def longest_interval(self, total_cost: float = 0.0) -> float | None:
        """``WHITTLE_MAX_INTERVAL`` in seconds for sources of ``total_cost`` (their crawl
        costs summed), its default resolved (None: no limit)."""
        return max_interval_of(self.max_interval, self.period, self.budget, total_cost)

    @property
    def sources_url(self) -> str | None:
        """``WHITTLE_SOURCES`` when it is the http(s) URL of a list (fetched through Scrapy)."""
        return self.sources.strip() if is_list_url(self.sources) else None

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> WhittleConfig:
        check_setting_names(settings)
        v = {s.name: s.read(settings) for s in SETTINGS}
        _check_together(v)
        per_source = v["WHITTLE_MAX_ENTRIES_PER_SOURCE"]
        policy = v["WHITTLE_POLICY"]
        return cls(
            sources=v["WHITTLE_SOURCES"], sources_refresh=v["WHITTLE_SOURCES_REFRESH"],
            policy=policy, core_policy=canonical_name(policy),
            policy_options=v["WHITTLE_POLICY_OPTIONS"],
            oracle_params=v["WHITTLE_ORACLE_PARAMS"],
            budget=v["WHITTLE_BUDGET"], period=v["WHITTLE_PERIOD"], step=v["WHITTLE_STEP"],
            spread=v["WHITTLE_SPREAD"], discovery=v["WHITTLE_DISCOVERY"],
            site_search=v["WHITTLE_SITE_SEARCH"],
            seed=v["WHITTLE_SEED"],
            min_interval=v["WHITTLE_MIN_INTERVAL"],
            max_interval=v["WHITTLE_MAX_INTERVAL"],
            host_limits=v["WHITTLE_HOST_LIMITS"],
            host_latency_factor=v["WHITTLE_HOST_LATENCY_FACTOR"],
            backoff_base=v["WHITTLE_BACKOFF_BASE"], backoff_max=v["WHITTLE_BACKOFF_MAX"],
            retire_after=v["WHITTLE_RETIRE_AFTER"],
            retire_404_after=v["WHITTLE_RETIRE_404_AFTER"],
            retire_probe=v["WHITTLE_RETIRE_PROBE"],
            sitemap_child_misses=v["WHITTLE_SITEMAP_CHILD_MISSES"],
            sitemap_child_max_age=v["WHITTLE_SITEMAP_CHILD_MAX_AGE"],
            conditional_get=v["WHITTLE_CONDITIONAL_GET"], hints=v["WHITTLE_HINTS"],
            hints_max_delay=v["WHITTLE_HINTS_MAX_DELAY"],
            max_feed_size=v["WHITTLE_MAX_FEED_SIZE"], max_entries_per_source=per_source,
            dedup=v["WHITTLE_DEDUP"], dedup_drop_params=v["WHITTLE_DEDUP_DROP_PARAMS"],
            engagement_scale=v["WHITTLE_ENGAGEMENT_SCALE"],
            item_value=v["WHITTLE_ITEM_VALUE"],
            logstats_interval=v["WHITTLE_LOGSTATS_INTERVAL"], state=v["WHITTLE_STATE"],
            half_life=v["WHITTLE_HALF_LIFE"],
            checkpoint_interval=v["WHITTLE_CHECKPOINT_INTERVAL"],
            trace_days=v["WHITTLE_TRACE_DAYS"],
            max_epochs=v["WHITTLE_MAX_EPOCHS"], clock=v["WHITTLE_CLOCK"],
            redis_url=v["WHITTLE_REDIS_URL"], redis_prefix=v["WHITTLE_REDIS_PREFIX"],
            redis_lease=v["WHITTLE_REDIS_LEASE"], redis_lock_ttl=v["WHITTLE_REDIS_LOCK_TTL"],
            redis_backlog=v["WHITTLE_REDIS_BACKLOG"], redis_wait=v["WHITTLE_REDIS_WAIT"],
            redis_standby=v["WHITTLE_REDIS_STANDBY"],
            websub_callback=v["WHITTLE_WEBSUB_CALLBACK"],
            websub_listen=v["WHITTLE_WEBSUB_LISTEN"], websub_lease=v["WHITTLE_WEBSUB_LEASE"],
            prometheus_listen=v["WHITTLE_PROMETHEUS_PORT"],
            parsing=ParsingConfig(
                parser=v["WHITTLE_FEED_PARSER"], workers=v["WHITTLE_PARSE_WORKERS"],
                inline_max_bytes=v["WHITTLE_PARSE_INLINE_MAX_BYTES"],
                timeout=v["WHITTLE_PARSE_TIMEOUT"],
                max_entries=(per_source if v["WHITTLE_MAX_FEED_ENTRIES"] is None
                             else v["WHITTLE_MAX_FEED_ENTRIES"]),
                max_field_chars=v["WHITTLE_MAX_FIELD_LENGTH"],
                max_bytes=v["WHITTLE_MAX_FEED_SIZE"]),
            articles=ArticlesConfig(
                enabled=v["WHITTLE_ARTICLES"], host_limit=v["WHITTLE_ARTICLE_HOST_LIMIT"],
                max_size=v["WHITTLE_ARTICLE_MAX_SIZE"],
                near_duplicates=v["WHITTLE_NEAR_DUPLICATES"]),
        )


def check_setting_names(settings: Mapping[str, Any]) -> None:
    """Refuse a ``WHITTLE_*`` name that is not in the table: Scrapy keeps any setting it is
    given, so ``-s WHITTLE_BUDGTE=3`` would otherwise be dropped without a word. The message
    names every unknown one, its value and the closest known name."""
    unknown = sorted(name for name in settings
                     if isinstance(name, str) and name.startswith(PREFIX)
                     and name not in SETTING)
    if not unknown:
        return
    parts = []
    for name in unknown:
        # compared without the prefix, which every name shares and would make any two alike
        close = difflib.get_close_matches(name.removeprefix(PREFIX),
                                          [s.removeprefix(PREFIX) for s in SETTING], n=1)
        hint = (f"did you mean {PREFIX}{close[0]}?" if close
                else "no setting has a name close to it")
        parts.append(f"{name} ({settings.get(name)!r}) is not a scrapy-whittle setting: {hint}")
    raise InvalidSetting("; ".join(parts) + " (the WHITTLE_* settings are listed in the "
                         "Settings section of docs/scrapy.md)")


#: ``WHITTLE_MAX_INTERVAL``'s default, in ``WHITTLE_PERIOD``s
MAX_INTERVAL_PERIODS = 24


#: the default maximum interval is at least this many times the interval at which the budget
#: would crawl every source in turn
MAX_INTERVAL_ROUNDS = 8


#: the shortest decision step of ``WHITTLE_STEP``'s default, in seconds: the resolution news
#: readers judge a crawler by, and the finest the feed readers' own rules schedule at
MIN_AUTO_STEP = 60.0


def auto_step(period: float, budget: float) -> float:
    """``WHITTLE_STEP``'s default: a decision a minute, or one per crawl the budget allows
    where it allows fewer than one a minute (a finer step would plan nothing most of the
    time, at the cost of a decision); one an epoch where the period is shorter than that."""
    step = max(MIN_AUTO_STEP, period / budget) if budget > 0 else period
    return min(step, period)


def max_interval_of(setting: float | None, period: float, budget: float = math.inf,
                    total_cost: float = 0.0) -> float | None:
    """The maximum interval in seconds of ``WHITTLE_MAX_INTERVAL`` = ``setting``: as set (0:
    no limit, None); unset, ``MAX_INTERVAL_PERIODS`` periods, or ``MAX_INTERVAL_ROUNDS``
    times the time the budget takes to crawl every source once (``total_cost`` / ``budget``
    periods) where that is longer. A limit the budget cannot keep would hand most crawls to
    the sources that waited longest, whatever they hold: a round-robin, not the index."""
    if setting is None:
        rounds = MAX_INTERVAL_ROUNDS * total_cost / budget if budget > 0 else 0.0
        return max(MAX_INTERVAL_PERIODS, rounds) * period
    return None if setting == 0 else float(setting)


def _check_together(v: dict[str, Any]) -> None:
    """The rules between settings (each one's own rule has been applied)."""
    policy, oracle = v["WHITTLE_POLICY"], v["WHITTLE_ORACLE_PARAMS"]
    cls = policy_class(canonical_name(policy))
    check_option_names(cls, policy, v["WHITTLE_POLICY_OPTIONS"])
    if policy == "oracle" and not oracle:
        raise _fail("WHITTLE_ORACLE_PARAMS", oracle,
                    "must name a JSON file of per-URL rate/mean_utility/decay "
                    "when WHITTLE_POLICY is 'oracle'")
    if cls.needs_parameters and not oracle:
        raise _fail("WHITTLE_POLICY", policy,
                    "needs the sources' true parameters: set WHITTLE_ORACLE_PARAMS, or "
                    "use a policy that learns them (e.g. 'whittle')")
    if v["WHITTLE_BACKOFF_MAX"] < v["WHITTLE_BACKOFF_BASE"]:
        raise _fail("WHITTLE_BACKOFF_MAX", v["WHITTLE_BACKOFF_MAX"],
                    f"must be >= WHITTLE_BACKOFF_BASE ({v['WHITTLE_BACKOFF_BASE']!r})")
    callback, listen = v["WHITTLE_WEBSUB_CALLBACK"], v["WHITTLE_WEBSUB_LISTEN"]
    if (callback is None) != (listen is None):
        given, missing = (("WHITTLE_WEBSUB_CALLBACK", callback) if listen is None
                          else ("WHITTLE_WEBSUB_LISTEN", listen)), (
            "WHITTLE_WEBSUB_LISTEN" if listen is None else "WHITTLE_WEBSUB_CALLBACK")
        raise _fail(given[0], given[1], f"needs {missing} as well: WebSub is on only with "
                    "the public callback URL and the local address it is served on")
    per_source, per_feed = v["WHITTLE_MAX_ENTRIES_PER_SOURCE"], v["WHITTLE_MAX_FEED_ENTRIES"]
    if per_feed is not None and per_feed > per_source:
        raise _fail("WHITTLE_MAX_FEED_ENTRIES", per_feed,
                    f"must be <= WHITTLE_MAX_ENTRIES_PER_SOURCE ({per_source!r}): entries "
                    "kept beyond what is remembered would be counted as new at every crawl")
