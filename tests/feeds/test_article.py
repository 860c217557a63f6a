"""Article extraction (scrapy_whittle.feeds.article) on the simulated web's pages: the text
the page holds and nothing of its boilerplate, the metadata, the canonical URL, failures; the
fingerprint tells a lightly edited copy from another story; the parse pool extracts in its
workers as inline."""

from __future__ import annotations

import asyncio
import random

import pytest
import pytest_twisted
from twisted.internet.defer import Deferred

from scrapy_whittle.feeds.article import ArticleError, extract_article, fingerprint, similarity
from scrapy_whittle.feeds.parse_pool import ParsePool
from sim.web.articles import ArticlePages

BASE = "http://news.example"
PAGES = ArticlePages(3)


def page(i: int, seq: int, published: str | None = "2026-11-28T10:00:00Z") -> bytes:
    return PAGES.page(i, seq, BASE, published)


def test_the_article_is_extracted_without_the_page_s_boilerplate():
    article = extract_article(page(2, 5), f"{BASE}/item/2/5")
    story = PAGES.story(2, 5)
    assert article.text == PAGES.text(2, 5)
    for chrome in ("cookies", "Advertisement", "Related stories", "Comments", "dataLayer",
                   "morning briefing", "All rights reserved"):
        assert chrome not in article.text
    assert article.title == story.title and article.authors == (story.author,)
    assert article.date == 1795824000.0 or article.date == 1795860000.0   # its day, or time
    assert article.language == "en"
    assert article.canonical is None                  # it names itself


def test_a_syndicated_copy_names_the_original_as_canonical():
    i, seq = next((i, s) for i in range(1, 99, 2) for s in range(50)
                  if PAGES.kind(i, s) == "syndicated")
    article = extract_article(page(i, seq), f"{BASE}/item/{i}/{seq}")
    assert article.canonical == f"{BASE}/item/{i - 1}/{seq}"
    assert article.text == PAGES.text(i - 1, seq)


def test_the_page_is_decoded_as_its_header_or_its_bytes_say_not_as_latin_1():
    # real pages often declare their charset in the HTTP header only: read as Latin-1 (lxml's
    # default for bytes), a UTF-8 page's non-ASCII letters came out garbled
    paragraphs = "".join(
        f"<p>Paragraph {n}: über die Brücke gingen „Menschen“ nach Zürich — café, naïve, "
        f"Straße {n} und Plätze, die sie noch nie gesehen hatten, am Abend.</p>"
        for n in range(6))
    html = (f"<html><head><title>Grüße</title></head><body><article><h1>Grüße</h1>"
            f"{paragraphs}</article></body></html>")
    url = f"{BASE}/item/0/9"
    want = "Paragraph 0: über die Brücke gingen „Menschen“ nach Zürich — café, naïve"
    utf8 = html.encode("utf-8")
    assert want in extract_article(utf8, url, content_type="text/html; charset=utf-8").text
    assert want in extract_article(utf8, url).text            # no header: UTF-8 by its bytes
    cp1252 = html.replace("„", '"').encode("cp1252")
    got = extract_article(cp1252, url, content_type="text/html; charset=windows-1252").text
    assert want.replace("„", '"') in got
    assert "Ã" not in got


def test_language_comes_from_the_page_or_its_header():
    html = page(0, 1).replace(b'<html lang="en">', b"<html>")
    assert extract_article(html, f"{BASE}/item/0/1").language is None
    assert extract_article(html, f"{BASE}/item/0/1", content_language="de-AT").language == "de"
    assert extract_article(page(0, 1, None), f"{BASE}/item/0/1").date is None


@pytest.mark.parametrize(("body", "kind"), [
    (b"", "no_text"),
    (b"   ", "no_text"),
    (b"<html><body><div id='app'></div><script>go()</script></body></html>", "no_text"),
])
def test_a_page_without_an_article_is_an_error_of_its_kind(body, kind):
    with pytest.raises(ArticleError) as info:
        extract_article(body, f"{BASE}/x")
    assert info.value.kind == kind


def test_the_fingerprint_tells_wire_copies_from_other_stories():
    wire = [(i, s) for i in range(1, 41, 2) for s in range(30) if PAGES.kind(i, s) == "wire"]
    assert len(wire) > 20
    for i, s in wire:
        assert similarity(fingerprint(PAGES.text(i, s)),
                          fingerprint(PAGES.text(i - 1, s))) >= 0.8
    rng = random.Random(0)
    own = [(i, s) for i in range(0, 40, 2) for s in range(30)]
    prints = {k: fingerprint(PAGES.text(*k)) for k in own}
    for _ in range(2000):
        a, b = rng.sample(own, 2)
        assert similarity(prints[a], prints[b]) < 0.7
    assert similarity(prints[own[0]], prints[own[0]]) == 1.0


@pytest.mark.parametrize("workers", [0, 1])
@pytest_twisted.ensureDeferred
async def test_the_pool_extracts_in_its_workers_as_inline(workers):
    async def go():
        pool = ParsePool(workers=workers)
        try:
            good = await pool.extract(page(4, 2), url=f"{BASE}/item/4/2")
            with pytest.raises(ArticleError):
                await pool.extract(b"<html></html>", url=f"{BASE}/x")
            assert good.text == PAGES.text(4, 2)
            assert pool.offloaded == (2 if workers else 0)
        finally:
            await pool.close()

    await Deferred.fromFuture(asyncio.ensure_future(go()))
