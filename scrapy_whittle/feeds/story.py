"""A story's identity across feeds: the same article listed by several feeds (a section
repeating its front page, a wire syndicated by several outlets) is one story.

An entry's story keys (:func:`story_keys`) are its link and its id where the id is an http(s)
URL (RSS ``guid isPermaLink``, most Atom ids of news sites), each normalised
(:func:`normalise_link`); an entry whose link or URL id is known as a story from another
feed is a repeat of that story. An entry with neither (an id like ``tag:`` or a bare number,
and no link) has no story key: it keeps the per-feed identity of ``FeedEntry.key``.

Normalisation (two links that differ only in these point at the same article):

* the scheme is lower-cased and ``http`` counts as ``https`` (outlets serve one article on
  both; the key carries neither);
* the host is lower-cased, a trailing dot dropped, the default port (80, 443) dropped; a
  ``www.`` prefix is kept (a different host may be a different site);
* user name and password are dropped;
* the fragment (``#...``) is dropped;
* the query's tracking parameters are dropped: those named in ``drop`` (default
  :data:`DROP_PARAMS`, the setting ``WHITTLE_DEDUP_DROP_PARAMS``), a name ending in ``*``
  standing for every name with that prefix, compared without regard to case; the parameters
  left are sorted by name (then value), since their order never selects another article;
* a trailing slash of the path is dropped (``/a/b/`` is ``/a/b``), an empty path is ``/``;
  the path is otherwise kept as written (case and percent-encoding: servers differ).
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import parse_qsl, urlencode, urlsplit

from scrapy_whittle.feeds.parsers.types import FeedEntry

#: Tracking parameters dropped by default: campaign tags (Google Analytics ``utm_*``, Matomo
#: and Piwik, HubSpot, Marketo, Mailchimp) and click identifiers (Facebook, Google, Microsoft,
#: Yandex, Instagram, Twitter).
DROP_PARAMS: tuple[str, ...] = (
    "utm_*", "mtm_*", "pk_*", "piwik_*", "_hsenc", "_hsmi", "hsctatracking", "mkt_tok",
    "mc_cid", "mc_eid", "fbclid", "gclid", "dclid", "gbraid", "wbraid", "msclkid", "yclid",
    "igshid", "twclid", "ref_src", "ref_url", "cmpid", "ncid", "ocid", "taid",
    "at_medium", "at_campaign", "smid", "sr_share",
)

_DEFAULT_PORTS = {"http": 80, "https": 443}


class ParamFilter:
    """Which query parameters are dropped: exact names and name prefixes (``utm_*``), both
    compared in lower case."""

    def __init__(self, drop: Iterable[str] = DROP_PARAMS) -> None:
        names = [str(d).strip().lower() for d in drop]
        self.exact = frozenset(n for n in names if n and not n.endswith("*"))
        self.prefixes = tuple(n[:-1] for n in names if n.endswith("*") and len(n) > 1)

    def dropped(self, name: str) -> bool:
        name = name.lower()
        return name in self.exact or (bool(self.prefixes) and name.startswith(self.prefixes))


DEFAULT_FILTER = ParamFilter()


def normalise_link(url: str | None, params: ParamFilter = DEFAULT_FILTER) -> str | None:
    """The story key of an http(s) URL (the module docstring's rules), without its scheme;
    None for anything else (another scheme, a relative or unreadable URL)."""
    if not url:
        return None
    url = url.strip()
    try:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in _DEFAULT_PORTS:
            return None
        host = (parts.hostname or "").rstrip(".")
        if not host:
            return None
        port = parts.port
    except ValueError:                  # a bad port or IPv6 literal
        return None
    if ":" in host:                     # IPv6 literal, brackets removed by urlsplit
        host = f"[{host}]"
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        host = f"{host}:{port}"
    path = parts.path or "/"
    if len(path) > 1 and path.endswith("/"):
        path = path.rstrip("/") or "/"
    query = ""
    if parts.query:
        kept = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
                if not params.dropped(k)]
        if kept:
            query = "?" + urlencode(sorted(kept), doseq=False)
    return f"{host}{path}{query}"


def story_keys(entry: FeedEntry, params: ParamFilter = DEFAULT_FILTER) -> tuple[str, ...]:
    """The entry's story keys: its normalised link and its id where the id is an http(s)
    URL (once each, the link's first); empty when it has neither."""
    link = normalise_link(entry.link, params)
    key = entry.key
    guid = normalise_link(key, params) if key[:4].lower() == "http" else None
    if link is None:
        return (guid,) if guid is not None else ()
    return (link,) if guid is None or guid == link else (link, guid)
