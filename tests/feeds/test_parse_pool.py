"""ParsePool: small bodies inline, large ones and fallbacks in worker processes, the same
result either way; failures (timeout, a dead worker) cost one body, not the pool."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet.defer import Deferred

from scrapy_whittle.feeds.parse import FeedError, parse_feed
from scrapy_whittle.feeds.parse_pool import ParsePool
from scrapy_whittle.feeds.parsers import ParseLimits

CORPUS = Path(__file__).resolve().parents[1] / "data" / "feeds"
URL = "http://example.com/feed.xml"
NOW = 1_700_000_000.0


def feed(n: int, pad: int = 0) -> bytes:
    items = "".join(f"<item><title>t{k} {'x' * pad}</title><guid>g{k}</guid>"
                    f"<pubDate>Tue, 14 Nov 2023 21:00:00 GMT</pubDate></item>"
                    for k in range(n))
    return f'<rss version="2.0"><channel><title>c</title>{items}</channel></rss>'.encode()


def on_loop(coro) -> Deferred:
    """Run a coroutine on the asyncio loop under Twisted's asyncio reactor."""
    return Deferred.fromFuture(asyncio.ensure_future(coro))


@pytest_twisted.ensureDeferred
async def test_inline_and_worker_give_the_same_feed():
    async def go():
        pool = ParsePool(workers=1, inline_max_bytes=10_000)
        try:
            small, large = feed(5), feed(400, pad=50)
            assert len(small) < 10_000 < len(large)
            got = [await pool.parse(b, url=URL, now=NOW) for b in (small, large)]
            assert (pool.inline, pool.offloaded) == (1, 1)
            for body, parsed in zip((small, large), got, strict=True):
                assert parsed == parse_feed(body, url=URL, now=NOW)
        finally:
            await pool.close()
    await on_loop(go())


@pytest_twisted.ensureDeferred
async def test_many_bodies_at_once_start_only_the_workers_asked_for():
    async def go():
        pool = ParsePool(workers=2, inline_max_bytes=0)
        try:
            bodies = [feed(20 + k) for k in range(40)]
            got = await asyncio.gather(*(pool.parse(b, url=URL, now=NOW) for b in bodies))
            assert [len(f.entries) for f in got] == [20 + k for k in range(40)]
            assert pool.started == 2 and len(pool._workers) == 2 and pool.offloaded == 40
            # both still running, ready for more
            assert all(w.proc.returncode is None for w in pool._workers)
        finally:
            await pool.close()
    await on_loop(go())


@pytest_twisted.ensureDeferred
async def test_errors_and_fallbacks_cross_the_process_boundary():
    async def go():
        pool = ParsePool(workers=1, inline_max_bytes=100_000)
        try:
            broken = (CORPUS / "broken_mismatched_case.xml").read_bytes()
            parsed = await pool.parse(broken, url=URL, now=NOW)
            assert parsed.parser == "feedparser" and pool.fallbacks == pool.offloaded == 1
            page = b"<!doctype html><html><body>" + b"<p>x</p>" * 20_000 + b"</body></html>"
            with pytest.raises(FeedError) as exc:
                await pool.parse(page, url=URL, now=NOW, content_type="text/html")
            assert exc.value.kind == "not_a_feed" and pool.offloaded == 2
            with pytest.raises(FeedError) as exc:   # refused before reaching a worker
                await pool.parse(b" " * (pool.limits.max_bytes + 1), url=URL, now=NOW)
            assert exc.value.kind == "too_large" and pool.offloaded == 2
        finally:
            await pool.close()
    await on_loop(go())


@pytest_twisted.ensureDeferred
async def test_a_slow_parse_fails_its_body_only():
    async def go():
        pool = ParsePool(workers=1, inline_max_bytes=0, timeout=1e-4)
        try:
            with pytest.raises(FeedError) as exc:
                await pool.parse(feed(3000, pad=200), url=URL, now=NOW)
            assert exc.value.kind == "parse_failed" and pool.failures == 1
            pool.timeout = 600.0
            assert len((await pool.parse(feed(3), url=URL, now=NOW)).entries) == 3
        finally:
            await pool.close()
    await on_loop(go())


@pytest_twisted.ensureDeferred
async def test_a_dead_worker_fails_the_body_it_held_and_hands_back_the_others():
    async def go():
        pool = ParsePool(workers=1, inline_max_bytes=0)
        try:
            await pool.start()
            (worker,) = pool._workers
            held = asyncio.ensure_future(pool.parse(feed(3000, pad=200), url=URL, now=NOW))
            waiting = asyncio.ensure_future(pool.parse(feed(3), url=URL, now=NOW))
            for _ in range(1000):                   # both written to the (still starting) worker
                if len(worker.pending) == 2:
                    break
                await asyncio.sleep(0.001)
            assert len(worker.pending) == 2, "the worker never held both bodies"
            os.kill(worker.proc.pid, signal.SIGKILL)
            with pytest.raises(FeedError) as exc:
                await held
            assert exc.value.kind == "parse_failed" and pool.failures == 1
            assert len((await waiting).entries) == 3
            assert pool._workers and pool._workers[0] is not worker
            # a worker that dies idle loses nothing
            (worker,) = pool._workers
            os.kill(worker.proc.pid, signal.SIGKILL)
            await worker.proc.wait()
            assert len((await pool.parse(feed(4), url=URL, now=NOW)).entries) == 4
            assert pool.failures == 1
        finally:
            await pool.close()
    await on_loop(go())


@pytest_twisted.ensureDeferred
async def test_no_workers_parses_everything_inline_with_the_fallback():
    async def go():
        pool = ParsePool(workers=0, limits=ParseLimits(max_entries=10))
        broken = (CORPUS / "broken_mismatched_case.xml").read_bytes()
        assert (await pool.parse(broken, url=URL, now=NOW)).parser == "feedparser"
        assert len((await pool.parse(feed(500), url=URL, now=NOW)).entries) == 10
        assert pool.offloaded == 0 and pool._workers == []
        await pool.close()
    await on_loop(go())


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"workers": -1}, "workers"), ({"workers": 1.5}, "workers"),
    ({"parser": "nope"}, "unknown feed parser"), ({"timeout": 0}, "timeout"),
    ({"inline_max_bytes": -1}, "inline_max_bytes"),
])
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ParsePool(**kwargs)


def test_a_worker_answers_a_parser_bug_with_parse_failed():
    import io
    import pickle

    from scrapy_whittle.feeds.parse_worker import HEADER, serve

    request = pickle.dumps({"body": b"<rss/>", "url": URL, "now": NOW, "parser": "nope"})
    inbox = io.BytesIO(HEADER.pack(len(request)) + request)
    outbox = io.BytesIO()
    serve(inbox.read, outbox.write)
    data = outbox.getvalue()
    (size,) = HEADER.unpack(data[:HEADER.size])
    status, error = pickle.loads(data[HEADER.size:HEADER.size + size])
    assert status == "error" and error.kind == "parse_failed" and "nope" in error.message


def test_without_an_event_loop_small_bodies_parse_and_close_works():
    # under another Twisted reactor than asyncio (no asyncio loop; the middleware's pool then
    # has no workers): run in a thread of its own, where no loop runs
    import threading

    pool, out = ParsePool(workers=0), {}

    def drive():
        for name, coro in (("parsed", pool.parse(feed(2), url=URL, now=NOW)),
                           ("closed", pool.close())):
            try:
                coro.send(None)
            except StopIteration as stop:
                out[name] = stop.value

    thread = threading.Thread(target=drive)
    thread.start()
    thread.join()
    assert len(out["parsed"].entries) == 2 and "closed" in out and pool._closed


def test_workers_import_this_copy_of_the_package_and_the_real_scrapy():
    # the workers' import path starts at the folder holding the package, never inside it,
    # where scrapy_whittle/scrapy would stand in for Scrapy
    from scrapy_whittle.feeds.parse_pool import IMPORT_ROOT

    assert (Path(IMPORT_ROOT) / "scrapy_whittle" / "__init__.py").is_file()
    assert not (Path(IMPORT_ROOT) / "scrapy" / "__init__.py").is_file()


def test_the_library_defaults_are_the_settings_defaults():
    from scrapy_whittle.feeds.parse_pool import PARSE_TIMEOUT
    from scrapy_whittle.service.config import DEFAULTS
    from scrapy_whittle.service.memory.entry_memory import EntryMemory

    assert ParseLimits().max_entries == DEFAULTS["WHITTLE_MAX_ENTRIES_PER_SOURCE"]
    assert EntryMemory().max_per_source == DEFAULTS["WHITTLE_MAX_ENTRIES_PER_SOURCE"]
    assert PARSE_TIMEOUT == DEFAULTS["WHITTLE_PARSE_TIMEOUT"]


@pytest_twisted.ensureDeferred
async def test_every_kind_crosses_the_process_boundary_and_gzip_goes_to_a_worker():
    import gzip
    import json

    async def go():
        pool = ParsePool(workers=1, inline_max_bytes=100_000)
        try:
            index = (b"<sitemapindex><sitemap><loc>http://example.com/s1.xml</loc></sitemap>"
                     b"</sitemapindex>")
            small_gzip = gzip.compress(b"<urlset><url><loc>http://example.com/a</loc></url>"
                                       b"</urlset>")
            jsonfeed = json.dumps({"version": "https://jsonfeed.org/version/1",
                                   "items": [{"id": "j1"}]}).encode()
            got = [await pool.parse(b, url=URL, now=NOW)
                   for b in (index, jsonfeed, small_gzip)]
            assert (pool.inline, pool.offloaded) == (2, 1)     # the gzip one, however small
            assert got[0].sources == ("http://example.com/s1.xml",)
            assert got[1].kind == "json10" and got[2].kind == "sitemap"
            assert got[2] == parse_feed(small_gzip, url=URL, now=NOW)
        finally:
            await pool.close()
    await on_loop(go())


@pytest.mark.parametrize("n", [0, 1, 3])
def test_a_parsed_feed_pickles_unchanged(n):
    import pickle

    from scrapy_whittle.feeds.hints import FeedHints
    from scrapy_whittle.feeds.parsers.types import FeedEntry, ParsedFeed

    entries = [FeedEntry(key=f"k{k}", title=None if k else "t", link=f"l{k}",
                         published=None if k == 1 else 10.0 * k, engagement=k or None)
               for k in range(n)]
    feed = ParsedFeed(kind="sitemap", entries=entries, warnings=["w"], notices=("no_dates",),
                      hints=FeedHints(), parser="lxml", sources=("https://a/s.xml",),
                      sources_partial=True)
    again = pickle.loads(pickle.dumps(feed, protocol=pickle.HIGHEST_PROTOCOL))
    assert again == feed and type(again.entries) is list
