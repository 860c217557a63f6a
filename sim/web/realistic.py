"""Real-sized feed entries for ``sim.serve --realistic``: what news feeds weigh.

A news feed entry carries a title of 8-14 words, a link, a guid, a date, a description of
about 500 bytes of escaped HTML, two categories, an author and a comment count: ~800 bytes of
RSS, so that a window of 50 entries is a ~40 KB feed, as measured on real news feeds. The
text of item (source, seq) is drawn from its own ``random.Random`` seeded by the server's
seed, the source and the item's number (cheaper to make than a numpy generator), so a
feed's bytes depend only on which items it shows and on their current comment counts; each
item's fixed part is rendered once and cached.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from email.utils import formatdate
from xml.sax.saxutils import escape, quoteattr

WORDS = (
    "government minister election market shares report city police court health school "
    "climate energy price rise fall new first year week people company deal talks plan "
    "world local national support record storm housing bank rates football final season "
    "study data research hospital water transport rail strike budget tax council village "
    "festival music film award museum science space launch vote party leader union border "
    "trade export farmers weather flood fire rescue crowd protest summit agreement"
).split()
CATEGORIES = ("World", "Politics", "Business", "Technology", "Science", "Health", "Sport",
              "Culture", "Local", "Climate", "Opinion", "Education")
AUTHORS = ("Ana Silva", "Ben Okafor", "Chloe Martin", "David Cohen", "Emma Larsen",
           "Farid Haddad", "Grace Kim", "Hugo Berger", "Ines Duarte", "Jonas Weber")


class RealisticItems:
    """Cached fixed parts of realistic entries, per (source, seq); at most ``max_items``."""

    def __init__(self, seed: int = 0, max_items: int = 200_000) -> None:
        self.seed, self.max_items = seed, max_items
        self._cache: OrderedDict[tuple[int, int, str], tuple[str, str]] = OrderedDict()

    def _text(self, source: int, seq: int) -> dict[str, str]:
        rng = random.Random(f"{self.seed}:{source}:{seq}")
        words = rng.choices(WORDS, k=110)
        n_title = rng.randint(8, 14)
        title = " ".join(words[:n_title]).capitalize()
        sentences, k = [], n_title
        while sum(len(s) for s in sentences) < 430:
            n = rng.randint(9, 16)
            sentences.append(" ".join(words[k:k + n]).capitalize() + ".")
            k = (k + n) % 90
        body = f"<p>{' '.join(sentences)}</p>"
        cat1, cat2 = rng.sample(CATEGORIES, 2)
        return {"title": title, "description": body, "cat1": cat1, "cat2": cat2,
                "author": rng.choice(AUTHORS)}

    def parts(self, source: int, seq: int, kind: str, link: str, guid: str,
              published: float, iso=None) -> tuple[str, str]:
        """``iso``: a function of the publication time giving Atom's date format."""
        # (XML before the comment count, XML after it) of one entry, RSS or Atom
        key = (source, seq, kind)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        t = self._text(source, seq)
        if kind == "rss":
            head = (f"<item><title>{escape(t['title'])}</title><link>{escape(link)}</link>"
                    f'<guid isPermaLink="false">{guid}</guid>'
                    f"<pubDate>{formatdate(published, usegmt=True)}</pubDate>"
                    f"<description>{escape(t['description'])}</description>"
                    f"<category>{t['cat1']}</category><category>{t['cat2']}</category>"
                    f"<dc:creator>{t['author']}</dc:creator><slash:comments>")
            tail = "</slash:comments></item>"
        else:
            head = (f"<entry><title>{escape(t['title'])}</title><id>{guid}</id>"
                    f"<link href={quoteattr(link)}/><published>{iso(published)}</published>"
                    f"<updated>{iso(published)}</updated><author><name>{t['author']}</name></author>"
                    f'<category term="{t["cat1"]}"/><category term="{t["cat2"]}"/>'
                    f'<summary type="html">{escape(t["description"])}</summary>'
                    f"<slash:comments>")
            tail = "</slash:comments></entry>"
        self._cache[key] = (head, tail)
        if len(self._cache) > self.max_items:
            self._cache.popitem(last=False)
        return head, tail
