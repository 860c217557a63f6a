"""What the cluster's planner learns from the workers, held until its next checkpoint.

The results stream ``Keys.results`` brings each fetch's result (learnt by the planner's
service, the crawl's in-flight record ended), the sources the workers' spiders register and
the entries' values their item pipelines feed back; the inbox ``Keys.inbox`` brings a
robots.txt ``Crawl-delay`` and the WebSub messages. A :class:`Learning` reads both in one
round trip and keeps, until the checkpoint that writes what they taught
(:meth:`Learning.taken`), the stream entries to acknowledge, the (source, crawl id) of the
results learnt and the (source, ``value:<entry>``) of the values the policy took: a planner
killed before it leaves them pending, and the next one learns them again.
"""

from __future__ import annotations

import json
import logging
import math

from scrapy_whittle.cluster.tasks import (
    FETCHED,
    NOT_MODIFIED,
    PUSH,
    VALUE,
    read_result,
    read_value,
    source_url,
)
from scrapy_whittle.feeds.hints import ServerHints
from scrapy_whittle.service.recrawl import RecrawlService
from scrapy_whittle.service.sources.registry import SourceSpec
from scrapy_whittle.service.types import Crawl

logger = logging.getLogger(__name__)

#: the kind of a value fed back, as the results stream returns it
VALUE_KIND = VALUE.encode()
#: inbox messages and results the planner reads at once
INBOX = 500
RESULTS = 1000


class Learning:
    """The learning of ``planner`` (a :class:`~scrapy_whittle.cluster.planner.Planner`: its
    service, crawls in flight, hosts and WebSub subscriptions while it leads)."""

    def __init__(self, planner) -> None:
        self.planner = planner
        self.node = planner.node
        self.acks: list[str] = []
        #: (source, crawl id) of the results learnt since the checkpoint
        self.learnt: list[tuple[int, str]] = []
        #: (source, "value:<message id>") of the values fed back since the checkpoint that
        #: the policy took (recorded with their sources' tags, as results are)
        self.valued: list[tuple[int, str]] = []

    def taken(self) -> tuple[list[str], list[tuple[int, str]], list[tuple[int, str]]]:
        """(Entries to acknowledge, results learnt, values taken) since the last call, for
        the checkpoint that writes what they taught."""
        out = self.acks, self.learnt, self.valued
        self.acks, self.learnt, self.valued = [], [], []
        return out

    def clear(self) -> None:
        self.acks.clear()
        self.learnt.clear()
        self.valued.clear()

    async def claim_results(self) -> int:
        """The results pending on planners that died, learnt again from here."""
        p = self.planner
        r, k = self.node.redis, p.keys
        start, entries = "0-0", []
        while True:
            got = await p.retry(lambda start=start: r.xautoclaim(
                k.results, "planner", p.consumer, min_idle_time=0, start_id=start,
                count=1000), "claiming results")
            entries += [e for e in got[1] if e[1]]
            start = got[0]
            if start in (b"0-0", "0-0"):
                break
        return self._learn_all(entries)

    async def read_messages(self, block: float = 0.0) -> int:
        """The inbox and the new results, read in one round trip (a pipeline: neither
        needs the other's atomicity); both handled, the inbox first. With ``block``
        (seconds), the read of the results waits that long for one if there is none: an
        idle planner sleeps in Redis, woken by the first result, instead of polling."""
        p = self.planner
        r, k = self.node.redis, p.keys
        wait_ms = int(block * 1000) or None        # (BLOCK 0 would wait for ever)

        async def read():
            pipe = r.pipeline(transaction=False)
            pipe.lpop(k.inbox, INBOX)
            pipe.xreadgroup("planner", p.consumer, {k.results: ">"}, count=RESULTS,
                            block=wait_ms)
            return await pipe.execute()

        items, got = await p.retry(read, "reading the inbox and results")
        self._handle_inbox(items or ())
        return len(items or ()) + self._learn_all(got[0][1] if got else [])

    def _learn_all(self, entries: list) -> int:
        done = []
        applied = self.planner.service.store.applied     # learnt by a checkpoint cut short
        for entry_id, fields in entries:
            if fields.get(b"kind") == VALUE_KIND:
                entry = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
                self._value(fields, entry, applied)
                self.acks.append(entry)
                continue
            key = _learnt_key(fields) if applied else None
            if key in applied:          # acknowledged only (its crawl ended at the restore)
                applied.discard(key)
                sid = None
            else:
                sid = self._learn(fields)
            self.acks.append(entry_id.decode() if isinstance(entry_id, bytes) else entry_id)
            if sid is not None:
                done.append((sid, fields[b"cid"].decode()))
        # their in-flight records go with the checkpoint that acknowledges their results: a
        # planner killed before it leaves both, and the next one learns them again
        self.learnt += done
        return len(entries)

    def _value(self, fields: dict, entry: str, applied: set) -> None:
        """A value fed back from a worker's item pipelines (results stream entry ``entry``),
        given to the service, unless a checkpoint cut short already wrote what it taught
        (``applied``)."""
        service = self.planner.service
        try:
            told = read_value(fields)
        except ValueError as exc:            # a worker's garbage
            self.node.stats.inc("cluster/bad_results")
            logger.debug("planner %s: feedback refused (%s)", self.planner.token, exc)
            return
        source = told["source"]
        sid = service.source_id(source) if isinstance(source, str) else source
        key = (sid, f"value:{entry}")
        if key in applied:
            applied.discard(key)
            return
        if service.report_value(source, told["value"], published=told["published"],
                                at=told["at"], base_value=told.get("base_value")):
            self.valued.append(key)

    def _learn(self, f: dict) -> int | None:
        planner, service = self.planner, self.planner.service
        url = source_url(f)
        if url is not None:              # a source a worker's spider registered
            if url:
                service.add_sources([SourceSpec(url=url)])
            else:                        # a worker's garbage
                self.node.stats.inc("cluster/bad_results")
            return None
        result = read_result(f)
        sid = result.source
        if result.kind == PUSH:          # a WebSub delivery: no crawl was in flight
            service.record_push(sid, result.new_items, result.reward, result.published,
                                now=result.at)
            return None
        if sid >= len(service.sources) or planner.in_flight.get(sid) != result.cid:
            self.node.stats.inc("cluster/stale_results")
            return None
        planner.forget(sid)
        crawl = Crawl(sid, service.url(sid), result.epoch, result.sent_at, {})
        if result.moved:
            crawl = self._moved(crawl, result.moved)
        etag = result.etag or None
        modified = result.last_modified or None
        hints = ServerHints.decode(result.hints)
        if result.hub and service.websub is not None:
            service.websub.discovered(crawl.source, result.hub, result.topic, result.at)
        if result.kind == FETCHED:
            if not result.readable:
                self.node.stats.inc("cluster/bad_results")
            # what a worker sent: record_fetch keeps the numbers in range
            service.record_fetch(crawl, result.new_items, result.reward, result.window_full,
                                 result.published, etag=etag, last_modified=modified,
                                 now=result.at, hints=hints, latency=result.latency)
            if result.children is not None:          # a sitemap index's listing
                service.index_listed(crawl, result.children, complete=result.complete,
                                     now=result.at)
        elif result.kind == NOT_MODIFIED:
            service.not_modified(crawl, etag=etag, last_modified=modified, hints=hints,
                                 latency=result.latency)
        else:
            service.crawl_failed(crawl, result.kind, result.cause, result.retry_after or None)
        return sid

    def _moved(self, crawl: Crawl, url: str) -> Crawl:
        """A worker's fetch of ``crawl`` answered at ``url`` after permanent redirects: the
        service's own decision (:meth:`RecrawlService.moved`: moved, its old URL an alias, or
        merged into the source at ``url``); the crawl its outcome counts for."""
        try:
            return self.planner.service.moved(crawl, url)
        except (TypeError, ValueError) as exc:      # a worker's garbage: the source stays
            self.node.stats.inc("cluster/bad_results")
            logger.warning("planner %s: a move of source %d to %r refused (%s)",
                           self.planner.token, crawl.source, url, exc)
            return crawl

    def _handle_inbox(self, items) -> None:
        service = self.planner.service
        for raw in items:
            msg = json.loads(raw)
            if msg["type"] == "source":   # from a node of an earlier version
                service.add_sources([SourceSpec(url=msg["url"])])
            elif msg["type"] == "crawl_delay":
                self.crawl_delay(service, msg["host"], msg["delay"])
            elif msg["type"] == "websub":
                if self.planner.websub is not None:
                    self.planner.websub.told(msg)
            elif msg["type"] == "value":      # from a node of an earlier version
                service.report_value(msg["source"], msg["value"],
                                     published=msg["published"], at=msg["at"],
                                     base_value=msg.get("base_value"))

    def crawl_delay(self, service: RecrawlService, host: str, delay) -> None:
        """A host's robots.txt ``Crawl-delay`` (seconds; garbage counted, not used)."""
        try:
            delay = float(delay)
        except (TypeError, ValueError):
            delay = math.nan
        if not (math.isfinite(delay) and delay > 0):
            self.node.stats.inc("cluster/bad_results")
            return
        service.set_crawl_delay(host, delay)
        hosts = self.planner.hosts
        hosts.delays[host] = max(hosts.delays.get(host, 0.0), delay)


def _learnt_key(fields: dict) -> tuple[int, str] | None:
    """(source, crawl id) of a result's fields; None when a worker sent garbage."""
    try:
        return int(fields[b"sid"]), fields[b"cid"].decode()
    except (KeyError, ValueError, UnicodeDecodeError):
        return None
