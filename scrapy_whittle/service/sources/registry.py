"""Where the sources come from (OPML, a text file of URLs, a JSON list, a Python list) and the
registry that numbers them.

A source id is its position in the registry; ids never change during a crawl and are saved
with the learned state, so a crawl resumed from JOBDIR finds every source under the same id.
Besides its URL a source carries a weight (the value of an entry without engagement, OPML
attribute ``whittle:weight`` or ``weight``) and a minimum interval between crawls in seconds
(``whittle:minInterval`` / ``minInterval``).
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from scrapy_whittle.core.columns import with_room
from scrapy_whittle.core.distinct import all_distinct
from scrapy_whittle.service.invalid_setting import InvalidSetting


class SourceListError(ValueError):
    """A source list that cannot be read, or that has no usable entry; the message says
    which file and why."""


class SourceList(list):
    """The sources of a list document, and in ``skipped`` what each entry that could not be
    used was and why (one line each): a bad entry is left out, the rest of the list used."""

    def __init__(self, specs=(), skipped=()) -> None:
        super().__init__(specs)
        self.skipped: list[str] = list(skipped)


#: bad entries named one by one in a message; the others are counted
SHOWN_SKIPPED = 3


def skipped_summary(skipped: list[str]) -> str:
    """The first bad entries of a list, and how many more, for one line of log."""
    shown = "; ".join(skipped[:SHOWN_SKIPPED])
    more = len(skipped) - SHOWN_SKIPPED
    return shown + (f"; and {more} more" if more > 0 else "")


def _usable(specs: list[SourceSpec], skipped: list[str], origin: str) -> SourceList:
    """The list, unless every entry was bad: then it is not a list of feeds at all."""
    if skipped and not specs:
        raise SourceListError(f"{origin}: no usable entry ({len(skipped)} bad: "
                              f"{skipped_summary(skipped)})")
    return SourceList(specs, skipped)


@dataclass
class SourceSpec:
    url: str
    title: str = ""
    weight: float = 1.0
    min_interval: float = 0.0
    category: str = ""


_URL = re.compile(r"(?i)(https?|file)://([^/?#\s]*)([^\s]*)\Z")

#: A URL that every part of Scrapy leaves as it is: w3lib's ``safe_url_string`` (which
#: ``Request`` applies to every URL) returns it unchanged, and so does yarl's normalisation
#: in the aiohttp download handler. Lower-case host names of letters, digits and hyphens,
#: an optional port other than 80 and 443, a path of unreserved characters (RFC 3986:
#: letters, digits, ``-._~``) and ``/``, then an optional non-empty query of those and
#: ``=&``; no dot segments, no percent-escapes, no fragment. Most feed URLs are such;
#: tested against both libraries in tests/service/test_sources.py.
_PLAIN_URL = re.compile(
    r"https?://[a-z0-9-]{1,63}(?:\.[a-z0-9-]{1,63})*(?::(?P<port>[1-9][0-9]{0,4}))?"
    r"(?:/[A-Za-z0-9._~/-]*(?:\?[A-Za-z0-9._~=&-]+)?)?")


def is_plain_url(url: str) -> bool:
    """True when ``url`` is one that Scrapy's request and download handlers leave unchanged
    (``_PLAIN_URL``): its request can skip the escaping (``verbatim_url``)."""
    m = _PLAIN_URL.fullmatch(url)
    return m is not None and "/." not in url and m.group("port") not in ("80", "443")


def url_host(url: str) -> str | None:
    """The host name of an http(s) or file URL as ``urlsplit(url).hostname`` gives it
    (lower case, without user info, port or IPv6 brackets; "" for ``file:///...``), or None
    when ``url`` is not such a URL. A regular expression: several times faster than
    urlsplit, which counts at a million sources."""
    m = _URL.match(url)
    if m is None:
        return None
    netloc = m.group(2)
    if not netloc:
        return "" if m.group(1).lower() == "file" and m.group(3) else None
    host = netloc.rpartition("@")[2]
    if host.startswith("["):
        return host[1:host.find("]")].lower() if "]" in host else None
    return host.partition(":")[0].lower()


_URL_LINES = re.compile(r"^(?:(?i:https?|file)://([^/?#\s]*)[^\s]*|.*)$", re.M)


def url_hosts(urls: list[str]) -> list[str | None]:
    """:func:`url_host` of each of ``urls``, for many at once: one pass of a regular
    expression over them all (one URL a line), and the common netloc (no user info, port or
    brackets) is the host as it is; faster than a call each, for the million URLs of a
    start-up."""
    nets = _URL_LINES.findall("\n".join(urls))
    if len(nets) != len(urls):           # a URL with a line break in it: one at a time
        return [url_host(u) for u in urls]
    every = "\n".join(nets)
    if "" not in nets and not any(c in every for c in "@:[") and every == every.lower():
        return nets                      # the usual list: every netloc is its host already
    out: list[str | None] = []
    append = out.append
    for url, netloc in zip(urls, nets, strict=True):
        if netloc and "@" not in netloc and ":" not in netloc and "[" not in netloc:
            append(netloc.lower())
        else:
            append(url_host(url))
    return out


def _valid_url(url: str) -> bool:
    return url_host(url) is not None


def _entry_error(exc: SourceListError, origin: str) -> str:
    """What was wrong with one entry, without the list's name (said once in the message)."""
    return str(exc).removeprefix(f"{origin}: ")


def _spec(url: str, origin: str, **kw: Any) -> SourceSpec:
    url = url.strip()
    if not _valid_url(url):
        raise SourceListError(f"{origin}: {url!r} is not an http(s) URL")
    return SourceSpec(url=url, **kw)


def _attr_float(attrs: dict[str, str], names: tuple[str, ...], default: float,
                origin: str) -> float:
    for key, value in attrs.items():
        local = key.rsplit("}", 1)[-1]
        if key in names or local in names:
            try:
                number = float(value)
            except ValueError:
                raise SourceListError(f"{origin}: attribute {key}={value!r} is not a number"
                                      ) from None
            if not 0 <= number < float("inf"):
                raise SourceListError(f"{origin}: attribute {key}={value!r} must be a finite "
                                      "number >= 0")
            return number
    return default


def parse_opml(data: bytes, origin: str = "OPML") -> SourceList:
    """Every ``<outline xmlUrl=...>`` of an OPML document, in document order.

    A feed's category is its OPML 2.0 ``category`` attribute (the first one, without leading
    slashes), else the title of the folder outline it sits in (how feed readers export).
    """
    root, broken = _recovered_xml(data, origin)
    specs: list[SourceSpec] = []
    skipped: list[str] = [f"line {line}: not well-formed XML ({why}), its outline left out"
                          for line, why in broken.values()]
    unmade = set(broken)                 # lines whose broken element was not met yet

    def walk(node, folder: str) -> None:
        for child in node.findall("outline"):
            if child.sourceline in unmade:        # what the parser made of a broken line
                unmade.discard(child.sourceline)
                walk(child, folder)
                continue
            url = child.get("xmlUrl", child.get("xmlurl"))
            name = child.get("title") or child.get("text") or ""
            if url is not None and not url.strip():
                skipped.append(f"line {child.sourceline}: outline {name!r}: empty xmlUrl")
                continue
            if not url:
                if not len(child):                # not a folder: a feed without its URL
                    skipped.append(f"line {child.sourceline}: outline {name!r} has no "
                                   "xmlUrl")
                walk(child, name or folder)
                continue
            declared = (child.get("category") or "").split(",")[0].strip().strip("/")
            try:
                specs.append(_spec(
                    url, origin, title=child.get("title") or child.get("text") or "",
                    weight=_attr_float(child.attrib, ("weight",), 1.0, origin),
                    min_interval=_attr_float(child.attrib, ("minInterval",), 0.0, origin),
                    category=declared or folder))
            except SourceListError as exc:
                skipped.append(_entry_error(exc, origin))
            walk(child, folder)

    body = root.find("body")
    walk(body if body is not None else root, "")
    return _usable(specs, skipped, origin)


def _recovered_xml(data: bytes, origin: str):
    """(root, {line found: (line meant, why)}) of an XML document read with recovery
    (lxml's): a broken line (an unclosed tag, a stray character) is named with the parser's
    reason, and what the parser made of it (the first element it gives the line where it
    found the fault) is for the caller to leave out; the rest of the document is read.
    Entities are not resolved and nothing is fetched (an OPML comes from anywhere)."""
    from lxml import etree

    parser = etree.XMLParser(recover=True, resolve_entities=False, no_network=True,
                             remove_comments=True, remove_pis=True)
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError as exc:
        root, error = None, str(exc)
    else:
        error = None
    # lxml notices an unclosed tag on the next line, reports the errors it meets there, and
    # names the tag's own line in one of their messages ("Couldn't find end of Start Tag
    # outline line 13"): where one does, that line is the broken one, not the next
    by_line: dict[int, list[str]] = {}
    for entry in parser.error_log:
        by_line.setdefault(entry.line, []).append(entry.message.strip())
    broken: dict[int, tuple[int, str]] = {}
    for line, messages in by_line.items():
        named = [(int(m.group(1)), text) for text in messages
                 if (m := re.search(r" line (\d+)$", text))]
        broken[line] = named[0] if named else (line, messages[0])
    if root is None:
        why = error or next(iter(broken.values()), "empty document")
        raise SourceListError(f"{origin}: not well-formed XML ({why})")
    return root, broken


#: A line that is not plainly "http(s)://host/...": only those are checked one by one
#: (user info, a port, brackets, a file URL... or not a URL at all)
_NOT_PLAIN_LINE = re.compile(r"^(?!(?i:https?)://[A-Za-z0-9.-]+(?:[/?#]|$)).*$", re.M)


def parse_url_lines(text: str, origin: str = "URL list") -> SourceList:
    """One URL per line; blank lines and ``#`` comments ignored."""
    lines = text.splitlines()
    urls = [words[0] for words in map(str.split, lines) if words and words[0][0] != "#"]
    # one scan of them all (a URL has no white space) instead of a host each: faster than
    # url_hosts, for the million lines of a start-up
    bad = {maybe.group(0) for maybe in _NOT_PLAIN_LINE.finditer("\n".join(urls))
           if url_host(maybe.group(0)) is None}
    if not bad:
        return SourceList(map(SourceSpec, urls))
    # the line numbers, for the message (not needed otherwise)
    skipped = [f"line {i}: {line.split()[0]!r} is not an http(s) URL"
               for i, line in enumerate(lines, 1) if line.split()[:1] and line.split()[0] in bad]
    return _usable([SourceSpec(u) for u in urls if u not in bad], skipped, origin)


def _json_number(item: dict, key: str, default: float, origin: str) -> float:
    value = item.get(key, default)
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not 0 <= number < float("inf") or isinstance(value, bool):
        raise SourceListError(f"{origin}: {key} {value!r} of {item.get('url')!r} must be a "
                              "finite number >= 0")
    return number


def _from_json(value: Any, origin: str) -> SourceList:
    if isinstance(value, dict):
        value = value.get("sources", [])
    if not isinstance(value, list):
        raise SourceListError(f"{origin}: expected a list of URLs or of objects with 'url'")
    out = []
    skipped = []
    for item in value:
        try:
            if isinstance(item, str):
                out.append(_spec(item, origin))
            elif isinstance(item, dict) and isinstance(item.get("url"), str):
                out.append(_spec(item["url"], origin, title=str(item.get("title", "")),
                                 weight=_json_number(item, "weight", 1.0, origin),
                                 min_interval=_json_number(item, "min_interval", 0.0, origin),
                                 category=str(item.get("category", ""))))
            else:
                raise SourceListError(f"{origin}: cannot read source {item!r}")
        except SourceListError as exc:
            skipped.append(_entry_error(exc, origin))
    return _usable(out, skipped, origin)


def load_sources(value: str | list | None) -> SourceList:
    """The sources named by ``WHITTLE_SOURCES``: a list of URLs, or the path of an OPML
    (``.opml`` / ``.xml`` or content starting with ``<``), JSON (``.json``) or text file. An
    http(s) URL names a list that the crawl fetches through Scrapy (:func:`is_list_url`):
    it gives no sources here."""
    if value is None:
        return SourceList()
    if isinstance(value, list | tuple):
        return _from_json(list(value), "WHITTLE_SOURCES")
    if is_list_url(value):
        return SourceList()
    path = Path(value).expanduser()
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SourceListError(f"{value}: cannot read ({exc.strerror or exc})") from None
    return parse_source_list(data, str(path), suffix=path.suffix.lower())


def is_list_url(value: Any) -> bool:
    """Whether ``WHITTLE_SOURCES`` is the http(s) URL of a source list."""
    return isinstance(value, str) and _valid_url(value.strip()) \
        and value.strip().lower().startswith(("http://", "https://"))


def parse_source_list(data: bytes, origin: str, *, suffix: str = "",
                      content_type: str | None = None, url: str | None = None
                      ) -> SourceList:
    """The sources of a list document: OPML (``suffix`` ``.opml`` / ``.xml``, an XML content
    type, or content starting with ``<``), JSON (``.json``, a JSON content type, or content
    starting with ``[`` / ``{``) or text (one URL a line). A feed (RSS, Atom) fetched from
    ``url`` where a list was expected is that one source."""
    ctype = (content_type or "").split(";")[0].strip().lower()
    head = data.lstrip()[:1]
    if suffix in (".opml", ".xml") or "xml" in ctype or head == b"<":
        if url is not None and _is_feed(data):
            return SourceList([_spec(url, origin)])
        return parse_opml(data, origin)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SourceListError(f"{origin}: not UTF-8 text") from None
    if suffix == ".json" or ctype.endswith("json") or head in (b"[", b"{"):
        try:
            return _from_json(json.loads(text), origin)
        except json.JSONDecodeError as exc:
            raise SourceListError(f"{origin}: invalid JSON ({exc})") from None
    return parse_url_lines(text, origin)


def _is_feed(data: bytes) -> bool:
    try:
        root = ET.fromstring(data)
    except ET.ParseError:
        return False
    return root.tag.rsplit("}", 1)[-1].lower() in ("rss", "feed", "rdf")


class SourceRegistry:
    """URL <-> id, compactly: at a million feeds the URLs are most of what a crawl holds.

    The URLs are kept as one UTF-8 byte string with an offset per source (about 8 bytes plus
    the URL's length, where a Python string and a dict entry would cost over 150); a URL is
    found through a sorted array of 64-bit XXH3 hashes (12 bytes a source; equal hashes are
    told apart by comparing the URLs), with the URLs added since its last rebuild in a small
    dict.

    A source that moved (a permanent redirect) keeps its id: its new URL is ``url(id)`` and
    each URL it had before is an alias, found by :meth:`get` like its own, so a list that
    still names an old URL finds the moved source instead of registering a twin. An alias
    may also lead to another source than the one first registered under that URL (a source
    that moved onto a URL another source had: :meth:`move`)."""

    REBUILD_AFTER = 4096

    def __init__(self) -> None:
        self._blob = bytearray()
        self._offsets = np.zeros(1024, dtype=np.int64)
        self._n = 0
        self._sorted_hashes = np.zeros(0, dtype=np.uint64)
        self._sorted_ids = np.zeros(0, dtype=np.int32)
        self._recent: dict[str, int] = {}
        self._pending: list[int] = []    # hashes of the ids added since the last rebuild
        self._aliases: dict[str, int] = {}  # URL -> id, ahead of the URLs registered
        self._current: dict[int, str] = {}  # id -> its URL, for the sources that moved

    def __len__(self) -> int:
        return self._n

    def url(self, sid: int) -> str:
        if self._current:
            moved = self._current.get(sid)
            if moved is not None:
                return moved
        return self.registered_url(sid)

    def registered_url(self, sid: int) -> str:
        """The URL ``sid`` was registered under (its own, whatever it moved to since)."""
        off = self._offsets
        return self._blob[off[sid]:off[sid + 1]].decode("utf-8", "surrogatepass")

    @property
    def aliases(self) -> dict[str, int]:
        """URL -> id of every alias (the URLs of sources that moved, and theirs before)."""
        return dict(self._aliases)

    def move(self, sid: int, url: str) -> int:
        """Source ``sid`` is now at ``url``: its URLs so far become aliases. Returns the id
        that ``url`` names now: ``sid``, or the other source already known there (then
        ``sid``'s URLs become that source's aliases: one source, not two)."""
        known = self.get(url)
        target = sid if known is None else known
        old = [u for u, i in self._aliases.items() if i == sid]
        old.append(self.url(sid))
        for u in old:
            self._aliases[u] = target
        if target == sid:
            self._aliases[url] = sid
            if url == self.registered_url(sid):
                self._current.pop(sid, None)
            else:
                self._current[sid] = url
        return target

    def add_alias(self, url: str, sid: int) -> None:
        """A stored alias (a restore): ``url`` names source ``sid``."""
        self._aliases[url] = sid

    @property
    def urls(self) -> list[str]:
        return [self.url(i) for i in range(self._n)]

    def get(self, url: str) -> int | None:
        """The id of ``url``, or None."""
        if self._aliases:
            sid = self._aliases.get(url)
            if sid is not None:
                return sid
        sid = self._recent.get(url)
        if sid is not None:
            return sid
        h = np.uint64(xxhash.xxh3_64_intdigest(url.encode("utf-8", "surrogatepass")))
        lo = int(np.searchsorted(self._sorted_hashes, h, side="left"))
        hi = int(np.searchsorted(self._sorted_hashes, h, side="right"))
        for sid in self._sorted_ids[lo:hi].tolist():
            if self.url(sid) == url:
                return sid
        return None

    def add(self, spec: SourceSpec | str) -> tuple[int, bool]:
        """(id, is_new) of the source's URL; a URL already known keeps its id."""
        url = spec if isinstance(spec, str) else spec.url
        sid = self.get(url)
        if sid is not None:
            return sid, False
        sid = self._n
        raw = url.encode("utf-8", "surrogatepass")
        self._offsets = with_room(self._offsets, sid + 1, sid + 2)
        self._blob += raw
        self._offsets[sid + 1] = len(self._blob)
        self._pending.append(xxhash.xxh3_64_intdigest(raw))
        self._n += 1
        self._recent[url] = sid
        if len(self._recent) > max(self.REBUILD_AFTER, self._n // 8):
            self._rebuild()
        return sid, True

    def _known_prefix(self, raws: list[bytes]) -> int:
        """k > 0 when ``raws[:k]`` are exactly the URLs of ids 0..k-1 (k = all the registry
        holds, or all of ``raws``): a restart with the same sources file finds its million
        URLs in one comparison of bytes instead of a lookup each."""
        k = min(self._n, len(raws))
        if k < 1024:
            return 0
        lengths = np.fromiter(map(len, raws[:k]), dtype=np.int64, count=k)
        if not np.array_equal(np.cumsum(lengths), self._offsets[1:k + 1]):
            return 0
        return k if b"".join(raws[:k]) == self._blob[:int(self._offsets[k])] else 0

    def add_many(self, urls: list[str]) -> tuple[list[int], list[int]]:
        """:meth:`add` for many URLs at once: (their ids, the positions in ``urls`` of those
        that were new); one pass over numpy arrays instead of a lookup each."""
        if self._aliases:
            hits = list(map(self._aliases.get, urls))
            rest = [j for j, sid in enumerate(hits) if sid is None]
            if len(rest) < len(urls):
                rest_ids, rest_new = self._add_many([urls[j] for j in rest])
                for j, sid in zip(rest, rest_ids, strict=True):
                    hits[j] = sid
                return hits, [rest[j] for j in rest_new]
        return self._add_many(urls)

    def _add_many(self, urls: list[str]) -> tuple[list[int], list[int]]:
        raws = [u.encode("utf-8", "surrogatepass") for u in urls]
        known = self._known_prefix(raws)
        if known:        # the same URLs, in the same order, as the first ones registered
            rest_ids, rest_new = (self._add_many(urls[known:]) if known < len(urls)
                                  else ([], []))
            return list(range(known)) + rest_ids, [known + j for j in rest_new]
        h = xxhash.xxh3_64_intdigest
        hashes = np.fromiter((h(r) for r in raws), dtype=np.uint64, count=len(raws))
        lo = np.searchsorted(self._sorted_hashes, hashes, side="left")
        hi = np.searchsorted(self._sorted_hashes, hashes, side="right")
        sids: list[int] = []
        new: list[int] = []
        batch: dict[str, int] = {}
        start = self._n
        every = (not self._recent and bool((lo == hi).all())
                 and all_distinct(hashes))
        if every:        # no hash known, none twice (a restore, a first start-up): all new
            sids, new = list(range(start, start + len(urls))), list(range(len(urls)))
        else:
            lo_l, hi_l = lo.tolist(), hi.tolist()
            for j, url in enumerate(urls):
                sid = self._recent.get(url)
                if sid is None and hi_l[j] > lo_l[j]:
                    for cand in self._sorted_ids[lo_l[j]:hi_l[j]].tolist():
                        if self.url(cand) == url:
                            sid = cand
                            break
                if sid is None:
                    sid = batch.get(url)
                    if sid is None:
                        sid = batch[url] = start + len(new)
                        new.append(j)
                sids.append(sid)
        if new:
            n_new = len(new)
            self._offsets = with_room(self._offsets, start + 1, start + n_new + 1)
            added = raws if every else [raws[j] for j in new]
            lengths = np.fromiter(map(len, added), dtype=np.int64, count=n_new)
            self._offsets[start + 1:start + n_new + 1] = len(self._blob) + np.cumsum(lengths)
            self._blob += b"".join(added)
            self._n += n_new
            self._rebuild(hashes if every else hashes[new])
        return sids, new

    def _rebuild(self, added: np.ndarray | None = None) -> None:
        """Sort the hashes of every id again: those of the last rebuild (by id), then the
        ones added since (``_pending``, then ``added``: the ids that follow)."""
        hashes = np.empty(self._n, dtype=np.uint64)
        hashes[self._sorted_ids] = self._sorted_hashes
        tail = np.asarray(self._pending, dtype=np.uint64)
        if added is not None:
            tail = np.concatenate([tail, added])
        hashes[self._sorted_ids.shape[0]:] = tail
        order = np.argsort(hashes, kind="stable")
        self._sorted_hashes = hashes[order]
        self._sorted_ids = order.astype(np.int32)
        self._recent = {}
        self._pending = []

    def state_dict(self) -> dict[str, Any]:
        return {"urls": self.urls}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.__init__()
        for url in state["urls"]:
            self.add(url)


class OracleParams(dict):
    """URL -> (rate, mean_utility, decay), and in ``profiles`` the daily rhythms the document
    gives (:func:`load_oracle_profiles`), for a rhythm-aware oracle."""

    profiles: dict[str, tuple[list[float], float, float]]


def _oracle_document(value: str | dict) -> tuple[Any, Callable[[str], Exception]]:
    """``WHITTLE_ORACLE_PARAMS`` as a document (read from the JSON file it names, if a path),
    and the maker of the InvalidSetting that names it."""

    def fail(why: str) -> InvalidSetting:
        return InvalidSetting(f"WHITTLE_ORACLE_PARAMS ({value!r}) {why}")

    if not isinstance(value, str):
        return value, fail
    try:
        return json.loads(Path(value).expanduser().read_text(encoding="utf-8")), fail
    except (OSError, ValueError) as exc:
        raise fail(f"cannot be read as JSON: {exc}") from None


def load_oracle(value: str | dict) -> OracleParams:
    """``WHITTLE_ORACLE_PARAMS``: URL -> (rate, mean_utility, decay), rates per second (and
    the rhythms, in ``.profiles``).

    Accepts the ``/params.json`` document of ``sim.serve`` (``{"sources": [{"url", "rate",
    "mean_utility", "decay"}, ...]}``), a mapping URL -> {rate, mean_utility, decay}, or the
    path of a JSON file holding either. Raises ``InvalidSetting`` naming the setting."""
    doc, fail = _oracle_document(value)
    if isinstance(doc, dict) and isinstance(doc.get("sources"), list):
        rows = {r.get("url"): r for r in doc["sources"] if isinstance(r, dict)}
    elif isinstance(doc, dict):
        rows = doc
    else:
        raise fail("must be a JSON object")
    out = OracleParams()
    for url, row in rows.items():
        try:
            params = tuple(float(row[k]) for k in ("rate", "mean_utility", "decay"))
        except (KeyError, TypeError, ValueError):
            raise fail(f"entry {url!r} needs numeric rate, mean_utility and decay") from None
        if not all(p >= 0 and p < float("inf") for p in params):
            raise fail(f"entry {url!r} has a negative or infinite parameter")
        out[str(url)] = params
    out.profiles = load_oracle_profiles(doc)
    return out


def load_oracle_profiles(value: str | dict) -> dict[str, tuple[list[float], float, float]]:
    """The daily rhythms in ``WHITTLE_ORACLE_PARAMS`` (what a rhythm-aware oracle needs
    besides rate, mean_utility and decay): URL -> (bins, bin_seconds, origin), from each
    source's optional ``"profile": {"bins": [p_0, ...], "bin_seconds": s, "origin": t}``
    (rate multipliers of mean 1 on bins of s seconds making one period, bin 0 starting at
    unix time t), as ``sim.serve`` publishes them for ``news-diurnal``. Accepts what
    ``load_oracle`` accepts. Sources without a profile are left out; a malformed one raises
    ``InvalidSetting`` naming the setting."""
    doc, fail = _oracle_document(value)
    if not isinstance(doc, dict):
        raise fail("must be a JSON object")
    rows = ({r.get("url"): r for r in doc["sources"] if isinstance(r, dict)}
            if isinstance(doc.get("sources"), list) else doc)
    out = {}
    for url, row in rows.items():
        prof = row.get("profile") if isinstance(row, dict) else None
        if prof is None:
            continue
        try:
            bins = [float(b) for b in prof["bins"]]
            width, origin = float(prof["bin_seconds"]), float(prof.get("origin", 0.0))
        except (KeyError, TypeError, ValueError):
            raise fail(f"entry {url!r}: profile needs numeric bins, bin_seconds "
                       "(and origin)") from None
        if not bins or not width > 0 or not all(0 <= b < float("inf") for b in bins) \
                or origin != origin:
            raise fail(f"entry {url!r}: profile bins must be >= 0 and bin_seconds > 0")
        out[str(url)] = (bins, width, origin)
    return out
