"""Article pages for ``sim.serve``: the story behind every feed entry, as news sites serve it.

``/item/<i>/<seq>`` (the link of entry ``seq`` of source ``i``) answers an HTML page whose
article (headline, byline, date, paragraphs) sits among the boilerplate real pages carry: a
navigation bar, a cookie banner, ads, scripts and styles, a "related stories" list, a
newsletter box, a comment thread and a footer. :meth:`ArticlePages.text` gives the
article's own text (its paragraphs, one a line), what an extractor should find; the
benchmark (``sim.bench.articles``) compares the extracted text with it.

Some stories are told twice. The sources come in pairs (2k, 2k + 1); an entry of an odd
source is, with its own seeded draw,

* ``own`` (most): a story of its own;
* ``syndicated`` (share ``syndicated``): the partner's entry of the same number, word for
  word, under this source's URL, its ``rel=canonical`` and ``og:url`` naming the partner's
  page (as syndication partners and AMP copies do);
* ``wire`` (share ``wire``): the partner's story edited a little (another headline, a
  sentence put before its lead, one added at its end), under its own canonical URL: a
  near-duplicate that only its text tells.

With ``faults`` a share of the pages fail (:data:`FAULTS`), to test what a crawl makes of
them. Everything is drawn from a ``random.Random`` seeded with the server's seed, the source and
the entry, so a page's bytes depend on nothing else (the date aside, from the feed).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from html import escape

from sim.web.realistic import AUTHORS, CATEGORIES, WORDS

#: words beyond the feeds' own, so that two unrelated stories share few phrases
MORE_WORDS = (
    "according officials said statement spokesperson on tuesday wednesday thursday friday "
    "monday morning evening residents across region country capital northern southern "
    "eastern western coast river valley mountain airport station bridge road highway "
    "industry workers employees customers investors analysts economists experts critics "
    "supporters opponents campaign committee inquiry investigation evidence witnesses "
    "judge trial verdict appeal sentence prison officers soldiers troops ceasefire talks "
    "negotiations proposal draft law bill reform policy changes measures funding grants "
    "billion million thousand percent quarter annual monthly growth decline inflation "
    "prices wages jobs unemployment demand supply shortage surplus harvest drought heat "
    "wave temperatures rainfall emissions carbon renewable solar wind nuclear plant"
).split()
VOCABULARY = tuple(WORDS) + tuple(MORE_WORDS)
KINDS = ("own", "syndicated", "wire")
#: how a faulty page fails: HTTP 404, HTTP 500, an image where a page was expected, a page
#: with no article in it (a script's empty shell)
FAULTS = ("404", "500", "binary", "empty")


@dataclass(frozen=True)
class Story:
    """One article page's content: its headline, author, paragraphs, section, and where its
    canonical link points (a path: ``/item/<j>/<seq>``), with the kind of copy it is."""

    title: str
    author: str
    paragraphs: tuple[str, ...]
    section: str
    canonical: str
    kind: str


def _sentence(rng: random.Random) -> str:
    words = rng.choices(VOCABULARY, k=rng.randint(9, 18))
    return " ".join(words).capitalize() + "."


def _paragraph(rng: random.Random) -> str:
    return " ".join(_sentence(rng) for _ in range(rng.randint(3, 5)))


class ArticlePages:
    """The article pages of a simulated web (see the module docstring). ``syndicated`` and
    ``wire``: the shares of odd sources' entries that copy their partner's story."""

    def __init__(self, seed: int = 0, *, syndicated: float = 0.1, wire: float = 0.1,
                 faults: float = 0.0) -> None:
        if not (0 <= syndicated and 0 <= wire and syndicated + wire <= 1):
            raise ValueError(f"syndicated ({syndicated!r}) and wire ({wire!r}) must be "
                             "shares summing to at most 1")
        if not 0 <= faults <= 1:
            raise ValueError(f"faults ({faults!r}) must be a share")
        self.seed, self.syndicated, self.wire = int(seed), float(syndicated), float(wire)
        self.faults = float(faults)

    def fault(self, source: int, seq: int) -> str | None:
        """How entry ``seq`` of ``source``'s page fails (a share ``faults`` of them, drawn
        apart from the rest): one of :data:`FAULTS`, or None for a good page."""
        if not self.faults:
            return None
        rng = random.Random(f"{self.seed}:fault:{source}:{seq}")
        return rng.choice(FAULTS) if rng.random() < self.faults else None

    def kind(self, source: int, seq: int) -> str:
        """``own``, ``syndicated`` or ``wire`` (module docstring)."""
        if source % 2 == 0:
            return "own"
        u = random.Random(f"{self.seed}:kind:{source}:{seq}").random()
        if u < self.syndicated:
            return "syndicated"
        return "wire" if u < self.syndicated + self.wire else "own"

    def _own(self, source: int, seq: int) -> Story:
        rng = random.Random(f"{self.seed}:article:{source}:{seq}")
        title = " ".join(rng.choices(VOCABULARY, k=rng.randint(7, 12))).capitalize()
        paragraphs = tuple(_paragraph(rng) for _ in range(rng.randint(4, 8)))
        return Story(title, rng.choice(AUTHORS), paragraphs, rng.choice(CATEGORIES),
                     f"/item/{source}/{seq}", "own")

    def story(self, source: int, seq: int) -> Story:
        kind = self.kind(source, seq)
        if kind == "own":
            return self._own(source, seq)
        original = self._own(source - 1, seq)
        if kind == "syndicated":
            return Story(original.title, original.author, original.paragraphs,
                         original.section, original.canonical, kind)
        rng = random.Random(f"{self.seed}:wire:{source}:{seq}")
        paragraphs = list(original.paragraphs)
        paragraphs[0] = _sentence(rng) + " " + paragraphs[0]     # a lead of its own
        paragraphs.append(_sentence(rng))                        # and a local angle
        title = " ".join(rng.choices(VOCABULARY, k=rng.randint(7, 12))).capitalize()
        return Story(title, original.author, tuple(paragraphs), original.section,
                     f"/item/{source}/{seq}", kind)

    def text(self, source: int, seq: int) -> str:
        """The article's own text: its paragraphs, one a line (no headline, no byline)."""
        return "\n".join(self.story(source, seq).paragraphs)

    def page(self, source: int, seq: int, base: str, published: str | None = None) -> bytes:
        """The HTML page of entry ``seq`` of ``source``; ``published``: its date (ISO 8601)
        as the page states it, if known."""
        s = self.story(source, seq)
        rng = random.Random(f"{self.seed}:chrome:{source}:{seq}")
        canonical = escape(base + s.canonical, quote=True)
        date_meta = (f'<meta property="article:published_time" content="{published}">'
                     if published else "")
        time_tag = f'<time datetime="{published}">{published[:10]}</time>' if published else ""
        nav = "".join(f'<li><a href="{base}/section/{c.lower()}">{c}</a></li>'
                      for c in CATEGORIES)
        related = "".join(
            f'<li><a href="{base}/item/{source}/{max(0, seq - k)}">'
            f'{escape(_sentence(rng)[:60])}</a></li>' for k in range(1, 6))
        comments = "".join(
            f'<div class="comment"><span class="user">{escape(rng.choice(AUTHORS))}</span>'
            f"<p>{escape(_sentence(rng))}</p></div>" for _ in range(rng.randint(2, 5)))
        body = "".join(f"<p>{escape(p)}</p>" for p in s.paragraphs)
        html = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{escape(s.title)} | Simulated source {source}</title>
<link rel="canonical" href="{canonical}">
<meta property="og:url" content="{canonical}">
<meta property="og:title" content="{escape(s.title, quote=True)}">
<meta name="author" content="{escape(s.author, quote=True)}">
{date_meta}
<style>body{{font-family:serif}} .ad{{min-height:250px}} nav li{{display:inline}}</style>
<script>window.dataLayer=window.dataLayer||[];function gtag(){{dataLayer.push(arguments)}}
gtag('js',new Date());gtag('config','UA-{source}-{seq}');</script>
</head><body>
<div id="cookie-banner">We use cookies to improve your experience. <button>Accept all</button></div>
<header><a class="logo" href="{base}/">Simulated source {source}</a>
<nav><ul>{nav}</ul></nav></header>
<div class="ad ad-top">Advertisement
<a href="https://ads.example/click?s={source}">Buy now</a></div>
<main><article>
<h1>{escape(s.title)}</h1>
<p class="byline">By <span class="author">{escape(s.author)}</span> {time_tag}
in <a href="{base}/section/{s.section.lower()}">{s.section}</a></p>
<div class="article-body">{body}</div>
</article>
<aside class="newsletter"><h3>Get the morning briefing</h3><form><input type="email">
<button>Sign up</button></form></aside>
<section class="related"><h2>Related stories</h2><ul>{related}</ul></section>
<section class="comments"><h2>Comments</h2>{comments}</section>
</main>
<div class="ad ad-side">Advertisement</div>
<footer><p>&copy; Simulated source {source}. All rights reserved.</p>
<a href="{base}/privacy">Privacy</a> <a href="{base}/terms">Terms</a></footer>
<script src="{base}/static/app.js" async></script>
</body></html>
"""
        return html.encode()
