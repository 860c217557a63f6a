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
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit


class SourceListError(ValueError):
    """A source list that cannot be read; the message says which file and why."""


@dataclass
class SourceSpec:
    url: str
    title: str = ""
    weight: float = 1.0
    min_interval: float = 0.0
    category: str = ""


def _valid_url(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https", "file") and bool(parts.netloc or parts.path)


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
            if not number >= 0:
                raise SourceListError(f"{origin}: attribute {key}={value!r} must be >= 0")
            return number
    return default


def parse_opml(data: bytes, origin: str = "OPML") -> list[SourceSpec]:
    """Every ``<outline xmlUrl=...>`` of an OPML document, in document order.

    A feed's category is its OPML 2.0 ``category`` attribute (the first one, without leading
    slashes), else the title of the folder outline it sits in (how feed readers export).
    """
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise SourceListError(f"{origin}: not well-formed XML ({exc})") from None
    specs: list[SourceSpec] = []

    def walk(node, folder: str) -> None:
        for child in node.findall("outline"):
            url = child.get("xmlUrl") or child.get("xmlurl")
            if not url:
                walk(child, child.get("title") or child.get("text") or folder)
                continue
            declared = (child.get("category") or "").split(",")[0].strip().strip("/")
            specs.append(_spec(
                url, origin, title=child.get("title") or child.get("text") or "",
                weight=_attr_float(child.attrib, ("weight",), 1.0, origin),
                min_interval=_attr_float(child.attrib, ("minInterval",), 0.0, origin),
                category=declared or folder))
            walk(child, folder)

    body = root.find("body")
    walk(body if body is not None else root, "")
    return specs


def parse_url_lines(text: str, origin: str = "URL list") -> list[SourceSpec]:
    """One URL per line; blank lines and ``#`` comments ignored."""
    return [_spec(line.split()[0], f"{origin} line {i}")
            for i, line in enumerate(text.splitlines(), 1)
            if line.strip() and not line.lstrip().startswith("#")]


def _from_json(value: Any, origin: str) -> list[SourceSpec]:
    if isinstance(value, dict):
        value = value.get("sources", [])
    if not isinstance(value, list):
        raise SourceListError(f"{origin}: expected a list of URLs or of objects with 'url'")
    out = []
    for item in value:
        if isinstance(item, str):
            out.append(_spec(item, origin))
        elif isinstance(item, dict) and isinstance(item.get("url"), str):
            out.append(_spec(item["url"], origin, title=str(item.get("title", "")),
                             weight=float(item.get("weight", 1.0)),
                             min_interval=float(item.get("min_interval", 0.0)),
                             category=str(item.get("category", ""))))
        else:
            raise SourceListError(f"{origin}: cannot read source {item!r}")
    return out


def load_sources(value: str | list | None) -> list[SourceSpec]:
    """The sources named by ``WHITTLE_SOURCES``: a list of URLs, or the path of an OPML
    (``.opml`` / ``.xml`` or content starting with ``<``), JSON (``.json``) or text file."""
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return _from_json(list(value), "WHITTLE_SOURCES")
    if _valid_url(value) and urlsplit(value).scheme in ("http", "https"):
        return [_spec(value, "WHITTLE_SOURCES")]
    path = Path(value).expanduser()
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SourceListError(f"{value}: cannot read ({exc.strerror or exc})") from None
    suffix = path.suffix.lower()
    head = data.lstrip()[:1]
    if suffix in (".opml", ".xml") or head == b"<":
        return parse_opml(data, str(path))
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SourceListError(f"{value}: not UTF-8 text") from None
    if suffix == ".json" or head in (b"[", b"{"):
        try:
            return _from_json(json.loads(text), str(path))
        except json.JSONDecodeError as exc:
            raise SourceListError(f"{value}: invalid JSON ({exc})") from None
    return parse_url_lines(text, str(path))


class SourceRegistry:
    """URL <-> id, plus what the scheduler remembers per source (kept small: plain lists)."""

    def __init__(self) -> None:
        self.specs: list[SourceSpec] = []
        self.ids: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.specs)

    def add(self, spec: SourceSpec) -> tuple[int, bool]:
        """(id, is_new) of ``spec.url``; a URL already known keeps its id."""
        sid = self.ids.get(spec.url)
        if sid is not None:
            return sid, False
        sid = len(self.specs)
        self.specs.append(spec)
        self.ids[spec.url] = sid
        return sid, True

    def url(self, sid: int) -> str:
        return self.specs[sid].url

    def state_dict(self) -> dict[str, Any]:
        return {"specs": [vars(s).copy() for s in self.specs]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.specs, self.ids = [], {}
        for d in state["specs"]:
            self.add(SourceSpec(**d))


def load_oracle(value: str | dict) -> dict[str, tuple[float, float, float]]:
    """``WHITTLE_ORACLE_PARAMS``: URL -> (rate, mean_utility, decay), rates per second.

    Accepts the ``/params.json`` document of ``sim.serve`` (``{"sources": [{"url", "rate",
    "mean_utility", "decay"}, ...]}``), a mapping URL -> {rate, mean_utility, decay}, or the
    path of a JSON file holding either. Raises ``NotConfigured`` naming the setting."""
    from scrapy.exceptions import NotConfigured

    def fail(why: str) -> NotConfigured:
        return NotConfigured(f"WHITTLE_ORACLE_PARAMS ({value!r}) {why}")

    doc: Any = value
    if isinstance(value, str):
        try:
            doc = json.loads(Path(value).expanduser().read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise fail(f"cannot be read as JSON: {exc}") from None
    if isinstance(doc, dict) and isinstance(doc.get("sources"), list):
        rows = {r.get("url"): r for r in doc["sources"] if isinstance(r, dict)}
    elif isinstance(doc, dict):
        rows = doc
    else:
        raise fail("must be a JSON object")
    out = {}
    for url, row in rows.items():
        try:
            params = tuple(float(row[k]) for k in ("rate", "mean_utility", "decay"))
        except (KeyError, TypeError, ValueError):
            raise fail(f"entry {url!r} needs numeric rate, mean_utility and decay") from None
        if not all(p >= 0 and p < float("inf") for p in params):
            raise fail(f"entry {url!r} has a negative or infinite parameter")
        out[str(url)] = params
    return out


def load_oracle_profiles(value: str | dict) -> dict[str, tuple[list[float], float, float]]:
    """The daily rhythms in ``WHITTLE_ORACLE_PARAMS`` (what a rhythm-aware oracle needs
    besides rate, mean_utility and decay): URL -> (bins, bin_seconds, origin), from each
    source's optional ``"profile": {"bins": [p_0, ...], "bin_seconds": s, "origin": t}``
    (rate multipliers of mean 1 on bins of s seconds making one period, bin 0 starting at
    unix time t), as ``sim.serve`` publishes them for ``news-diurnal``. Accepts what
    ``load_oracle`` accepts. Sources without a profile are left out; a malformed one raises
    ``NotConfigured`` naming the setting."""
    from scrapy.exceptions import NotConfigured

    def fail(why: str) -> NotConfigured:
        return NotConfigured(f"WHITTLE_ORACLE_PARAMS ({value!r}) {why}")

    doc: Any = value
    if isinstance(value, str):
        try:
            doc = json.loads(Path(value).expanduser().read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise fail(f"cannot be read as JSON: {exc}") from None
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
