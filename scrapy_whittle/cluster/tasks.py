"""The cluster's two messages: a crawl handed to the workers (the stream ``Keys.tasks``) and
what a worker's fetch showed, sent back to the planner (the stream ``Keys.results``, which
carries the sources the workers' spiders register and the values their item pipelines feed
back too). Each is written and read here only,
so the node and the planner cannot disagree on a field."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from scrapy_whittle.service.sources.index_children import Listing
from scrapy_whittle.service.types import Crawl

#: the ``kind`` of a result whose fetch returned a feed; a 304 is ``NOT_MODIFIED``, anything
#: else names a failure (the stats key under ``errors/``)
FETCHED = "ok"
NOT_MODIFIED = "not_modified"
#: the ``kind`` of a WebSub delivery's result: no task, no crawl, no budget; its entries
#: counted as a fetch's (``cid`` empty)
PUSH = "push"
#: the ``kind`` of a message of the results stream that registers a source (a spider's
#: request, a sitemap index's child): :func:`source_fields`, no crawl's result
SOURCE = "source"
#: the ``kind`` of a message of the results stream that feeds an entry's value back from a
#: worker's item pipelines: :func:`value_fields`, no crawl's result
VALUE = "value"


def task_fields(crawl: Crawl) -> dict:
    """A crawl as a message of the tasks stream."""
    return {"sid": crawl.source, "url": crawl.url, "epoch": crawl.epoch,
            "sent_at": repr(crawl.sent_at), "headers": json.dumps(crawl.headers),
            "weight": repr(crawl.weight), "cid": crawl.cid}


def task_crawl(f: dict) -> Crawl:
    """Inverse of :func:`task_fields` (the fields as Redis returns them, bytes)."""
    return Crawl(int(f[b"sid"]), f[b"url"].decode(), int(f[b"epoch"]), float(f[b"sent_at"]),
                 json.loads(f[b"headers"]), f[b"cid"].decode(), float(f[b"weight"]))


@dataclass(slots=True)
class CrawlResult:
    """What the fetch of a task showed. ``at``: when the worker saw it (the instant its
    entries were told new); ``published``: the new entries' publication times (None:
    unknown); ``hints``: :meth:`ServerHints.encode`'s text; ``readable``: False when the
    counts of a fetched feed could not be read (they are zero then), or its listing (it has
    none then); ``moved``: the URL the feed answered at after permanent redirects (301,
    308), if any."""

    source: int
    cid: str
    epoch: int
    sent_at: float
    at: float
    kind: str
    new_items: int = 0
    reward: float = 0.0
    window_full: bool = False
    published: list[float | None] = field(default_factory=list)
    etag: str = ""
    last_modified: str = ""
    cause: str = ""
    hints: str = ""
    retry_after: float = 0.0
    readable: bool = True
    #: where the source answered after permanent redirects ("": where it was asked)
    moved: str = ""
    #: the seconds the server took to answer a fetch or a 304 (None: not measured)
    latency: float | None = None
    #: the WebSub hub and topic the fetched feed names ("": none, or WebSub off)
    hub: str = ""
    topic: str = ""
    #: the child sitemaps a fetched sitemap index lists (None: not an index), and whether
    #: it was read whole (:class:`~scrapy_whittle.service.sources.index_children.Listing`)
    children: list[str] | None = None
    complete: bool = True

    @classmethod
    def of(cls, crawl: Crawl, at: float, kind: str, **fields) -> CrawlResult:
        """The result of ``crawl`` (a task's crawl: its ``cid`` set)."""
        return cls(crawl.source, crawl.cid, crawl.epoch, crawl.sent_at, at, kind, **fields)


def source_fields(url: str) -> dict:
    """A source to register, as a message of the results stream: acknowledged with the
    planner's checkpoint that holds it, as a result is, so that a planner killed before
    that checkpoint leaves it to the next (an inbox message it had popped would be lost)."""
    return {"kind": SOURCE, "url": url}


def source_url(f: dict) -> str | None:
    """The URL of a message of :func:`source_fields` (the fields as Redis returns them,
    bytes); None: another message."""
    if f.get(b"kind") != SOURCE.encode():
        return None
    return f.get(b"url", b"").decode("utf-8", "surrogatepass")


def value_fields(source: str | int, value: float, published: float, at: float,
                 base_value: float | None) -> dict:
    """An entry's value fed back (``RecrawlService.report_value``'s arguments) as a message
    of the results stream: acknowledged with the planner's checkpoint that holds what it
    taught, as a result is, so that a planner killed before that checkpoint leaves it to
    the next (an inbox message it had popped would be lost)."""
    return {"kind": VALUE, "feedback": json.dumps({
        "source": source if isinstance(source, str) else int(source), "value": value,
        "published": published, "at": at, "base_value": base_value})}


def read_value(f: dict) -> dict | None:
    """The arguments of a message of :func:`value_fields` (the fields as Redis returns them,
    bytes): ``source`` (URL or id), ``value``, ``published``, ``at``, ``base_value``; None:
    another message. ValueError: a worker's garbage (the values themselves are judged by the
    service, as a single process's are)."""
    if f.get(b"kind") != VALUE.encode():
        return None
    try:
        told = json.loads(f.get(b"feedback", b""))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"unreadable feedback: {exc}") from None
    if not (isinstance(told, dict) and {"source", "value", "published", "at"} <= set(told)
            and isinstance(told["source"], str | int) and not isinstance(told["source"], bool)):
        raise ValueError(f"not a value's feedback: {str(told)[:100]!r}")
    return told


def listing_fields(listing: Listing | None) -> dict:
    """A sitemap index's listing (None: not an index) as :class:`CrawlResult`'s fields."""
    if listing is None:
        return {}
    return {"children": list(listing.urls), "complete": bool(listing.complete)}


def result_fields(result: CrawlResult) -> dict:
    """A result as a message of the results stream."""
    return {"sid": result.source, "cid": result.cid, "epoch": result.epoch,
            "sent_at": repr(result.sent_at), "at": repr(result.at), "kind": result.kind,
            "new": result.new_items, "reward": repr(result.reward),
            "full": int(result.window_full), "published": json.dumps(result.published),
            "etag": result.etag, "modified": result.last_modified, "cause": result.cause,
            "hints": result.hints, "retry": repr(result.retry_after), "moved": result.moved,
            "lat": "" if result.latency is None else repr(result.latency),
            **({"hub": result.hub, "topic": result.topic} if result.hub else {}),
            **({"children": json.dumps(result.children, ensure_ascii=False,
                                       separators=(",", ":")),
                "partial": int(not result.complete)} if result.children is not None else {})}


#: the fields of a fetched result the report script fills in (it tells the new entries)
JUDGED = ("new", "reward", "full", "published")


def report_fields(result: CrawlResult) -> dict:
    """The message of ``result`` (a fetch's) but :data:`JUDGED`'s fields."""
    return {k: v for k, v in result_fields(result).items() if k not in JUDGED}


def read_result(f: dict) -> CrawlResult:
    """Inverse of :func:`result_fields` (the fields as Redis returns them, bytes). A message
    without its crawl's identity raises (KeyError, ValueError); counts that cannot be read
    (a worker's garbage) make a result with nothing new, a listing that cannot be read one
    without a listing (no child missed), ``readable`` False either way."""
    text = {key.decode(): value.decode() for key, value in f.items()}
    result = CrawlResult(int(text["sid"]), text["cid"], int(text["epoch"]),
                         float(text["sent_at"]), float(text["at"]), text["kind"],
                         window_full=text.get("full") == "1", etag=text.get("etag", ""),
                         last_modified=text.get("modified", ""), cause=text.get("cause", ""),
                         hints=text.get("hints", ""), moved=text.get("moved", ""),
                         hub=text.get("hub", ""), topic=text.get("topic", ""))
    try:
        result.retry_after = float(text.get("retry", "0"))
    except ValueError:
        result.retry_after = 0.0
    try:
        latency = float(text.get("lat") or "nan")
        result.latency = latency if latency >= 0 else None      # NaN, garbage: unknown
    except ValueError:
        result.latency = None
    if result.kind in (FETCHED, PUSH):
        try:
            result.new_items, result.reward = int(text["new"]), float(text["reward"])
            result.published = json.loads(text["published"])
        except (KeyError, ValueError, TypeError):
            result.new_items, result.reward, result.published = 0, 0.0, []
            result.readable = False
    if result.kind == FETCHED and "children" in text:
        result.children = _listing(text["children"])
        result.complete = text.get("partial") != "1"
        if result.children is None:       # a worker's garbage: no listing (no child missed)
            result.readable = False
    return result


def _listing(raw: str) -> list[str] | None:
    """A result's ``children`` field: a JSON list of URLs (None: not one)."""
    try:
        urls = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
        return None
    return urls
