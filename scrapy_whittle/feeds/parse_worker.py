"""One worker process of :class:`scrapy_whittle.feeds.parse_pool.ParsePool`:
``python -m scrapy_whittle.feeds.parse_worker [--nice N]``.

It reads requests on stdin and writes replies on stdout, each a pickle behind an 8-byte
big-endian length: a request is the keyword arguments of
:func:`scrapy_whittle.feeds.parse.parse_feed`, a reply ``("ok", ParsedFeed)`` or
``("error", FeedError)``; a request with ``task="article"`` holds those of
:func:`scrapy_whittle.feeds.article.extract_article` instead, its reply ``("ok", Article)``
or ``("ok", ArticleError)`` (an unexpected exception becomes ``FeedError("parse_failed")``).
It stops at the end of its input; ``--nice N`` lowers its priority by N. Anything else
printed to stdout goes to stderr, so that it cannot break the protocol. A process of its
own, rather than ``multiprocessing``, whose ``spawn`` re-imports the parent's ``__main__``
in every worker (a crawl script without an ``if __name__ == "__main__"`` guard would start
a crawl in each).
"""

from __future__ import annotations

import os
import pickle
import struct
import sys

HEADER = struct.Struct(">Q")


def serve(read, write) -> None:
    from scrapy_whittle.feeds.parse import FeedError, parse_feed

    while True:
        header = read(HEADER.size)
        if len(header) < HEADER.size:
            return
        (size,) = HEADER.unpack(header)
        kwargs = pickle.loads(read(size))
        task = kwargs.pop("task", "feed")
        try:
            reply = ("ok", parse_feed(**kwargs) if task == "feed" else article_reply(kwargs))
        except FeedError as exc:
            reply = ("error", exc)
        except Exception as exc:   # a parser bug fails this body, not the worker
            reply = ("error", FeedError("parse_failed", f"{type(exc).__name__}: {exc}"))
        data = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        write(HEADER.pack(len(data)) + data)


def article_reply(kwargs: dict):
    """An article page's content (``task`` "article"): the Article, or the ArticleError."""
    from scrapy_whittle.feeds.article import ArticleError, extract_article

    try:
        return extract_article(**kwargs)
    except ArticleError as exc:
        return exc


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--nice"]:       # parsing yields the CPU to the crawler's event loop
        os.nice(int(args[1]))
    channel_in = os.fdopen(os.dup(sys.stdin.fileno()), "rb", buffering=0)
    channel_out = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

    def read(n: int) -> bytes:
        chunks, left = [], n
        while left:
            chunk = channel_in.read(left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def write(data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[channel_out.write(view):]

    try:
        serve(read, write)
    except BrokenPipeError:     # the crawler is gone (killed): nobody waits for the reply
        pass


if __name__ == "__main__":
    main()
