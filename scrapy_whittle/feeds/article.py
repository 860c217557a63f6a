"""An article page's content: main text, title, authors, date, language, canonical URL and a
fingerprint of its text, extracted by trafilatura (the extra ``articles``). No Scrapy import:
:class:`~scrapy_whittle.feeds.parse_pool.ParsePool` runs :func:`extract_article` in its worker
processes, as it parses large feeds, so that extraction never holds the crawl's event loop.

* ``text``: the main text, paragraphs one a line, without navigation, related links,
  comments, ads or scripts (trafilatura's ``include_comments=False``);
* ``title``, ``authors`` (trafilatura's ``author``, split at ``;``), ``date`` (unix seconds,
  the page's own publication date, None if it states none);
* ``language``: what the page declares (``<html lang>``, else the ``Content-Language``
  header), its primary subtag lower-cased; trafilatura guesses a language only with
  py3langid installed, a model this extra does not pull in;
* ``canonical``: the page's ``rel=canonical`` / ``og:url`` (trafilatura's ``url``), made
  absolute; None where the page names none, or names itself;
* ``fingerprint``: a 256-bit SimHash of the text's word shingles (:func:`fingerprint`),
  what tells a near-duplicate story under another URL.

A page that yields no text (not HTML, empty, no article in it) raises
:class:`ArticleError`, kind ``no_text``; an unreadable one ``unreadable``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urljoin

#: word shingles of this many words make a text's fingerprint
SHINGLE = 3
#: 64-bit hashes of a shingle (seeds 0..BANDS-1) make its BITS bits: 64 alone tell a lightly
#: edited copy from an unrelated story too coarsely
BANDS = 4
BITS = 64 * BANDS

_WORD = re.compile(r"\w+")
_DATE_FORMAT = "%Y-%m-%dT%H:%M:%S%z"


class ArticleError(Exception):
    """An article page that gave no usable content: ``kind`` (``no_text``, ``unreadable``,
    ``extract_failed``) and the cause."""

    def __init__(self, kind: str, cause: str) -> None:
        super().__init__(cause)
        self.kind = kind
        self.cause = cause

    def __reduce__(self):          # picklable across the worker processes of the parse pool
        return (type(self), (self.kind, self.cause))


@dataclass(frozen=True)
class Article:
    """What an article page says (see the module docstring)."""

    text: str
    title: str | None
    authors: tuple[str, ...]
    date: float | None
    language: str | None
    canonical: str | None
    fingerprint: int


def fingerprint(text: str) -> int:
    """A :data:`BITS`-bit SimHash (Charikar) of ``text``'s :data:`SHINGLE`-word shingles, in
    lower case: each shingle hashed (XXH3-64 under :data:`BANDS` seeds) to BITS bits, and
    bit k of the fingerprint set where most shingles have it. Two texts that share most of
    their shingles differ in few bits (:func:`similarity`). Not trafilatura's ``Simhash``:
    its hashes are 64 bits at most (a longer one has zero bits past 64), too coarse to tell
    a lightly edited copy from an unrelated story, and it costs tens of milliseconds a
    text in pure Python where this costs a fraction of one."""
    import numpy as np
    import xxhash

    words = _WORD.findall(text.lower())
    shingles = [" ".join(words[i:i + SHINGLE]).encode()
                for i in range(max(1, len(words) - SHINGLE + 1))]
    hashes = np.array([[xxhash.xxh3_64_intdigest(s, seed) for seed in range(BANDS)]
                       for s in shingles], dtype=np.uint64)
    bits = np.unpackbits(hashes.view(np.uint8), axis=1)        # (shingles, BITS)
    majority = (2 * bits.sum(axis=0, dtype=np.int64) >= len(shingles)).astype(np.uint8)
    return int.from_bytes(np.packbits(majority).tobytes(), "big")


def similarity(a: int, b: int) -> float:
    """The share of bits two fingerprints agree on (1: the same shingles)."""
    return 1.0 - (a ^ b).bit_count() / BITS


def _date(value: str | None) -> float | None:
    if not value:
        return None
    for fmt in (_DATE_FORMAT, "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"):
        try:
            parsed = datetime.strptime(value, fmt)
        except ValueError:
            continue
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed.timestamp()
    return None


def _language(tree, content_language: str | None) -> str | None:
    declared = tree.get("lang") if tree is not None else None
    declared = declared or content_language
    if not declared:
        return None
    primary = declared.split(",")[0].strip().split("-")[0].split("_")[0].lower()
    return primary if primary.isalpha() and 2 <= len(primary) <= 3 else None


def _encoding(body: bytes, content_type: str | None) -> str | None:
    """The page's encoding as a browser (and Scrapy's ``TextResponse``) reads it: the
    ``Content-Type`` header's charset, else a byte order mark, else a ``<meta>`` charset, else
    UTF-8 if the bytes decode as such, else cp1252. Left to lxml, bytes without a ``<meta>``
    charset are read as Latin-1 whatever the header says: a UTF-8 page's every non-ASCII
    letter garbled."""
    from w3lib.encoding import html_to_unicode

    return html_to_unicode(content_type, body)[0]


def extract_article(body: bytes, url: str, content_language: str | None = None,
                    content_type: str | None = None) -> Article:
    """The content of the article page ``body`` fetched from ``url`` (module docstring);
    ``content_type``: the response's ``Content-Type`` header, whose charset decodes it."""
    import lxml.html
    from lxml.etree import ParserError
    from trafilatura import bare_extraction

    if not body or not body.strip():
        raise ArticleError("no_text", "empty page")
    try:
        parser = lxml.html.HTMLParser(encoding=_encoding(body, content_type))
    except LookupError:                 # a charset that lxml does not know: its own guess
        parser = None
    try:
        tree = lxml.html.document_fromstring(body, parser=parser)
    except (ParserError, ValueError) as exc:
        raise ArticleError("unreadable", f"not HTML: {exc}") from None
    language = _language(tree, content_language)
    try:
        doc = bare_extraction(tree, url=url, with_metadata=True, include_comments=False,
                              include_tables=True,
                              date_extraction_params={"outputformat": _DATE_FORMAT,
                                                      "original_date": True,
                                                      "extensive_search": False})
    except Exception as exc:  # a bug of the extractor fails this page, not the crawl
        raise ArticleError("extract_failed", f"{type(exc).__name__}: {exc}") from None
    text = (getattr(doc, "text", None) or "").strip() if doc is not None else ""
    if not text:
        raise ArticleError("no_text", "no article text found")
    canonical = getattr(doc, "url", None)
    canonical = urljoin(url, canonical) if canonical else None
    if canonical == url:
        canonical = None
    author = getattr(doc, "author", None) or ""
    authors = tuple(a.strip() for a in author.split(";") if a.strip())
    return Article(text=text, title=getattr(doc, "title", None) or None, authors=authors,
                   date=_date(getattr(doc, "date", None)), language=language,
                   canonical=canonical, fingerprint=fingerprint(text))
