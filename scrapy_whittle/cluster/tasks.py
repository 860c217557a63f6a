"""Crawls as messages of the tasks stream."""

from __future__ import annotations

import json

from scrapy_whittle.service.recrawl import Crawl


def task_fields(crawl: Crawl) -> dict:
    """A crawl as a message of the tasks stream."""
    return {"sid": crawl.source, "url": crawl.url, "epoch": crawl.epoch,
            "sent_at": repr(crawl.sent_at), "headers": json.dumps(crawl.headers),
            "weight": repr(crawl.weight), "cid": crawl.cid}


def task_crawl(f: dict) -> Crawl:
    """Inverse of :func:`task_fields` (the fields as Redis returns them, bytes)."""
    return Crawl(int(f[b"sid"]), f[b"url"].decode(), int(f[b"epoch"]), float(f[b"sent_at"]),
                 json.loads(f[b"headers"]), f[b"cid"].decode(), float(f[b"weight"]))
