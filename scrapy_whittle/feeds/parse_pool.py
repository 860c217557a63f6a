"""Parse feeds without holding the event loop: small bodies inline, the rest in processes.

Neither parser releases the GIL while it parses (feedparser is pure Python; feedparser-rs keeps the
GIL: two threads parse no faster than one, and the loop waits for the whole parse), so a thread
pool would not keep the loop responsive: work that may take longer than a few milliseconds goes
to a bounded pool of worker *processes* (:mod:`scrapy_whittle.feeds.parse_worker`). A body of
at most ``inline_max_bytes`` is parsed on the loop by the fast parser (cheaper than a round
trip to a worker: the parser module's ``INLINE_MAX_BYTES`` says up to what size); a larger one,
or one the fast parser reads only in part (feedparser then parses it), is parsed in a worker,
and so is a gzip body of any size (a sitemap ``.xml.gz``: what it decompresses to is unknown
until it is). At most ``workers`` parses run at once; the others wait in their worker's line
(no more than Scrapy has responses in flight, ``CONCURRENT_REQUESTS``), written to it at once
so that a worker never idles while the event loop is busy. A parse that takes longer than
``timeout`` seconds, or a worker that dies (killed, out of memory), fails only its body
(``FeedError("parse_failed")``); the worker is replaced.
Article pages are extracted the same way (:meth:`ParsePool.extract`, ``WHITTLE_ARTICLES``).
No Scrapy import: usable from any asyncio program::

    pool = ParsePool(parser="feedparser-rs", workers=2, limits=ParseLimits())
    feed = await pool.parse(body, url=url, now=time.time(), content_type=ctype)
    await pool.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pickle
import sys
import time
from collections import deque
from pathlib import Path

from scrapy_whittle.feeds.kinds import is_gzip
from scrapy_whittle.feeds.parse import NeedsFallback, parse_feed
from scrapy_whittle.feeds.parse_worker import HEADER
from scrapy_whittle.feeds.parsers import DEFAULT_PARSER, get_parser
from scrapy_whittle.feeds.parsers.types import FeedError, ParsedFeed, ParseLimits

logger = logging.getLogger(__name__)

#: seconds a worker may spend on one feed before it is killed (``WHITTLE_PARSE_TIMEOUT``)
PARSE_TIMEOUT = 60.0

#: the folder holding the ``scrapy_whittle`` package, put first on the workers' import path so
#: that they run this very copy of it (a checkout not installed, or installed elsewhere); not
#: the package's own folder, where ``scrapy_whittle/scrapy`` would shadow Scrapy itself
IMPORT_ROOT = str(Path(__file__).resolve().parents[2])


class _Worker:
    """One ``python -m scrapy_whittle.feeds.parse_worker`` process. Requests are written at once
    and answered in order (a worker parses one at a time), so the worker never waits for the
    event loop to pick up a reply before it gets its next body; a reader task resolves the
    futures. ``timeout`` runs from the moment a request reaches the head of the line."""

    def __init__(self, proc: asyncio.subprocess.Process, timeout: float, on_death) -> None:
        self.proc, self.timeout, self.on_death = proc, timeout, on_death
        self.pending: deque[tuple[dict, asyncio.Future]] = deque()
        self.dead = False
        self._wake = asyncio.Event()
        self._exited = asyncio.ensure_future(proc.wait())
        self.reader = asyncio.ensure_future(self._read())

    @classmethod
    async def start(cls, timeout: float, on_death, nice: int = 0) -> _Worker:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (IMPORT_ROOT, env.get("PYTHONPATH")) if p)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "scrapy_whittle.feeds.parse_worker", "--nice", str(nice),
            env=env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        return cls(proc, timeout, on_death)

    def submit(self, kwargs: dict, future: asyncio.Future) -> None:
        if self.dead or self.proc.returncode is not None:   # gone: hand the body back
            if not self.dead:                 # before the reader noticed: same as _die
                self.dead = True
                self.reader.cancel()
                culprit = self.pending.popleft() if self.pending else None
                others, self.pending = list(self.pending), deque()
                self.on_death(self, "the parser's worker process died", culprit,
                              [*others, (kwargs, future)])
            else:
                self.on_death(self, "", None, [(kwargs, future)])
            return
        data = pickle.dumps(kwargs, protocol=pickle.HIGHEST_PROTOCOL)
        self.pending.append((kwargs, future))
        self._wake.set()
        try:
            self.proc.stdin.write(HEADER.pack(len(data)) + data)
        except (ConnectionError, RuntimeError):   # died: the reader hands the work back
            pass

    async def _read(self) -> None:
        stdout = self.proc.stdout
        while True:
            if not self.pending:
                self._wake.clear()
                wake = asyncio.ensure_future(self._wake.wait())
                try:
                    await asyncio.wait((wake, self._exited),
                                       return_when=asyncio.FIRST_COMPLETED)
                finally:
                    wake.cancel()
                if self._exited.done() and not self.pending:   # died idle: no body lost
                    return self._die("the parser's worker process exited")
                continue
            try:
                header = await asyncio.wait_for(stdout.readexactly(HEADER.size), self.timeout)
                (size,) = HEADER.unpack(header)
                status, value = pickle.loads(await stdout.readexactly(size))
            except TimeoutError:
                return self._die(f"parse took longer than {self.timeout:g} s")
            except (asyncio.IncompleteReadError, ConnectionError, EOFError,
                    pickle.UnpicklingError):
                return self._die("the parser's worker process died")
            _kwargs, future = self.pending.popleft()
            if not future.done():
                if status == "error":
                    future.set_exception(value)
                else:
                    future.set_result(value)

    def _die(self, why: str) -> None:
        """The request at the head fails; the others go back to the pool."""
        self.dead = True
        self.kill()
        culprit = self.pending.popleft() if self.pending else None
        others, self.pending = list(self.pending), deque()
        self.on_death(self, why, culprit, others)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()

    async def stop(self) -> None:
        self.dead = True
        self.reader.cancel()
        self._exited.cancel()
        if self.proc.returncode is None:
            with contextlib.suppress(Exception):
                self.proc.stdin.close()
            try:
                await asyncio.wait_for(self.proc.wait(), 2.0)
            except TimeoutError:
                self.kill()
                await self.proc.wait()


class ParsePool:
    """``await pool.parse(...)``: :func:`~scrapy_whittle.feeds.parse.parse_feed` off the loop.

    ``workers=0`` parses everything inline (no process is started). ``inline_max_bytes``
    defaults to the parser's own (``INLINE_MAX_BYTES`` of its adapter module).
    ``inline_slice``: seconds of inline parsing per event-loop iteration (0: parse at once,
    in the caller's callback). ``nice``: how much lower the workers' CPU priority is than
    the crawler's (on a machine with fewer cores than busy processes, a worker at the same
    priority takes the CPU from the event loop and stalls it). Counters:
    ``inline``, ``offloaded`` (bodies parsed in a worker), ``fallbacks`` (inline attempts
    that went to a worker), ``failures`` (timeouts and dead workers), ``started`` (worker
    processes started).
    """

    def __init__(self, *, parser: str = DEFAULT_PARSER, workers: int = 1,
                 limits: ParseLimits | None = None, inline_max_bytes: int | None = None,
                 timeout: float = PARSE_TIMEOUT, inline_slice: float = 0.01,
                 nice: int = 10) -> None:
        adapter = get_parser(parser)
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise ValueError(f"workers ({workers!r}) must be an integer >= 0")
        if not timeout > 0:
            raise ValueError(f"timeout ({timeout!r}) must be > 0")
        self.parser, self.workers, self.timeout = parser, workers, float(timeout)
        self.limits = limits or ParseLimits()
        self.inline_max_bytes = (adapter.INLINE_MAX_BYTES if inline_max_bytes is None
                                 else int(inline_max_bytes))
        if self.inline_max_bytes < 0:
            raise ValueError(f"inline_max_bytes ({inline_max_bytes!r}) must be >= 0")
        if not inline_slice >= 0:
            raise ValueError(f"inline_slice ({inline_slice!r}) must be >= 0")
        self.inline_slice = float(inline_slice)
        self.nice = int(nice)
        self._inline_queue: deque = deque()
        self._draining = False
        self._workers: list[_Worker] = []
        self._starting = 0                    # worker processes being started
        self._changed = asyncio.Event()       # a start ended
        self._tasks: set[asyncio.Task] = set()
        self._closed = False
        self.inline = self.offloaded = self.fallbacks = self.failures = self.started = 0

    def __repr__(self) -> str:
        return (f"ParsePool(parser={self.parser!r}, workers={self.workers}, "
                f"limits={self.limits!r}, inline_max_bytes={self.inline_max_bytes}, "
                f"timeout={self.timeout})")

    # -- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        """Start every worker process now rather than at the first large body."""
        while not self._closed and len(self._workers) + self._starting < self.workers:
            self._starting += 1
            try:
                self._workers.append(await self._start_worker())
            finally:
                self._starting -= 1
                self._changed.set()

    async def close(self) -> None:
        """Stop the workers; ``parse`` afterwards parses inline. Idempotent."""
        self._closed = True
        workers, self._workers = self._workers, []
        for worker in workers:
            for _kwargs, future in worker.pending:
                if not future.done():
                    future.set_exception(FeedError("parse_failed", "the parse pool closed"))
        if workers:                  # (gather() needs a loop even with nothing to wait for)
            await asyncio.gather(*(w.stop() for w in workers))

    # -- parsing ------------------------------------------------------------------------
    async def parse(self, body: bytes, *, url: str, now: float,
                    content_type: str | None = None) -> ParsedFeed:
        """The parsed feed, or FeedError; the loop is held only for small bodies."""
        kwargs = {"body": bytes(body), "url": url, "now": now, "content_type": content_type,
                  "parser": self.parser, "limits": self.limits}
        offload = self.workers > 0 and not self._closed
        small = len(body) <= self.inline_max_bytes and not is_gzip(body)
        if not offload or small or len(body) > self.limits.max_bytes:
            try:
                self.inline += 1
                return await self._inline(kwargs, fallback=not offload)
            except NeedsFallback:
                self.fallbacks += 1
        self.offloaded += 1
        return await self._in_worker(kwargs)

    async def extract(self, body: bytes, *, url: str, content_language: str | None = None,
                      content_type: str | None = None):
        """An article page's :class:`~scrapy_whittle.feeds.article.Article`, or its
        ``ArticleError``; extracted in a worker (an article takes longer than a small feed's
        parse) unless ``workers`` is 0. A worker that dies or times out on it gives
        ``FeedError("parse_failed")``."""
        kwargs = {"task": "article", "body": bytes(body), "url": url,
                  "content_language": content_language, "content_type": content_type}
        if self.workers > 0 and not self._closed:
            self.offloaded += 1
            result = await self._in_worker(kwargs)
        else:
            from scrapy_whittle.feeds.parse_worker import article_reply

            self.inline += 1
            kwargs.pop("task")
            result = article_reply(kwargs)
        if isinstance(result, Exception):
            raise result
        return result

    async def _inline(self, kwargs: dict, *, fallback: bool) -> ParsedFeed:
        """Parse on the loop, at most ``inline_slice`` seconds of parsing per loop iteration:
        when 64 responses arrive together, their parses (and what the caller does with each
        result) are spread over several iterations instead of one long one."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:            # no asyncio loop (another reactor): parse now
            return parse_feed(**kwargs, fallback=fallback)
        if not self.inline_slice:
            return parse_feed(**kwargs, fallback=fallback)
        future = loop.create_future()
        self._inline_queue.append((kwargs, fallback, future))
        if not self._draining:
            self._draining = True
            loop.call_soon(self._drain, loop)
        return await future

    def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        start = time.perf_counter()
        queue = self._inline_queue
        while queue:
            kwargs, fallback, future = queue.popleft()
            if future.cancelled():
                continue
            try:
                future.set_result(parse_feed(**kwargs, fallback=fallback))
            except Exception as exc:    # FeedError, NeedsFallback: the caller's to handle
                future.set_exception(exc)
            if queue and time.perf_counter() - start >= self.inline_slice:
                loop.call_soon(self._drain, loop)     # the rest in the next iteration
                return
        self._draining = False

    async def _in_worker(self, kwargs: dict) -> ParsedFeed:
        future = asyncio.get_running_loop().create_future()
        await self._submit(kwargs, future)
        return await future

    async def _submit(self, kwargs: dict, future: asyncio.Future) -> None:
        """Hand the body to the worker with the fewest waiting, starting one if fewer than
        ``workers`` run or start (one start at a time per missing worker: 64 bodies arriving
        together start ``workers`` processes, not 64)."""
        if not self._closed and len(self._workers) + self._starting < self.workers:
            self._starting += 1
            try:
                worker = await self._start_worker()
            except OSError as exc:
                logger.error("feed parser: cannot start a worker process (%s)", exc)
            else:
                self._workers.append(worker)
            finally:
                self._starting -= 1
                self._changed.set()
        while not self._workers and self._starting and not self._closed:
            self._changed.clear()
            await self._changed.wait()
        if self._closed or not self._workers:
            future.set_exception(FeedError("parse_failed", "no parse worker is running"))
            return
        worker = min(self._workers, key=lambda w: len(w.pending))
        worker.submit(kwargs, future)
        with contextlib.suppress(ConnectionError, RuntimeError):   # a death is the reader's
            await worker.proc.stdin.drain()       # back-pressure: the pipe's buffer is full

    async def _start_worker(self) -> _Worker:
        self.started += 1
        return await _Worker.start(self.timeout, self._worker_died, self.nice)

    def _worker_died(self, worker: _Worker, why: str, culprit, others) -> None:
        if worker in self._workers:
            self._workers.remove(worker)
        if culprit is not None:
            kwargs, future = culprit
            if not future.done():
                future.set_exception(self._failed(kwargs, why))
        for kwargs, future in others:      # innocent bodies: to a fresh worker
            if not future.done():
                task = asyncio.ensure_future(self._submit(kwargs, future))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    def _failed(self, kwargs: dict, why: str) -> FeedError:
        self.failures += 1
        url, size = kwargs["url"], len(kwargs["body"])
        logger.warning("feed parser: %s on %s (%d bytes); worker replaced", why, url, size)
        return FeedError("parse_failed", f"{url}: {why} ({size} bytes)")
