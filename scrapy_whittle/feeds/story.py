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

import re
from collections.abc import Iterable, Sequence
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

# A link already in its normal form is its own key less the scheme: a lower-case http(s)
# scheme and host (no user, no port, no trailing dot), a non-empty path of printable ASCII
# with no ":" and no trailing slash, no query, no fragment. Most links of news feeds are; a
# regular expression tells, at a fraction of the cost of parsing the URL (possessive loops
# and one-character look-behinds: sre never backtracks). Anything it refuses (a root path "/"
# too) takes the full path (urlsplit), which gives the same key for what it accepts
# (tests/feeds/test_story.py compares them on generated URLs).
_PATH = r"""[!"$-9;->@-~]*+"""              # printable ASCII but # : ?
_NORMAL = rf"https?://[a-z0-9_.-]++(?<!\.)/{_PATH}(?<!/)"
_ONE_NORMAL = re.compile(_NORMAL)
_LINES_NORMAL = re.compile(rf"(?:{_NORMAL}\n)*+")


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
    if _ONE_NORMAL.fullmatch(url):
        return url[8:] if url[4] == "s" else url[7:]
    return _normalise_parsed(url, params)


def _normalise_parsed(url: str, params: ParamFilter) -> str | None:
    """:func:`normalise_link` by parsing the URL: every case (the fast path's reference)."""
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


def normal_links(urls: Sequence[str]) -> list[str] | None:
    """The keys of ``urls`` when every one of them is in its normal form already (the fast
    path of :func:`normalise_link`, for a whole feed at once: one match over the joined
    links); None when any is not."""
    if not urls:
        return []
    joined = "\n".join(urls) + "\n"
    if _LINES_NORMAL.fullmatch(joined) is None:
        return None
    # "://" only after each scheme (a path has no ":"); no line break inside a link (as
    # many lines as links)
    keys = joined.replace("https://", "").replace("http://", "").split("\n")
    keys.pop()                          # after the last line break
    return keys if len(keys) == len(urls) else None


def story_key_column(entries: Sequence[FeedEntry]) -> list[str] | None:
    """One story key per entry, in order, in the usual case: each entry has exactly one (a
    link and an id that is the same link or no URL, or no link and a URL id) and it is in
    its normal form (:func:`normal_links`). None otherwise: :func:`story_keys` of each then
    (which gives the same keys where this gives any)."""
    links = [e.link for e in entries]
    if links.count(None) == len(links):
        return normal_links([e.key for e in entries])    # the ids (story_keys: if http)
    if None in links:
        return None
    ids = [e.key for e in entries]
    if ids != links and any(i != link and i[:4].lower() == "http"
                            for i, link in zip(ids, links, strict=True)):
        return None
    return normal_links(links)
