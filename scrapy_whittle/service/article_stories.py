"""One story counted once by what its article says (``WHITTLE_ARTICLES``): its canonical URL,
and with ``WHITTLE_NEAR_DUPLICATES`` its text.

An entry is judged a repeat at its feed's fetch by its story keys (its link, its URL id:
:mod:`~scrapy_whittle.service.story_memory`). Its article tells more, once fetched:

* **Canonical URL.** A page's ``rel=canonical`` / ``og:url`` naming another URL than its own
  (a syndicated copy naming the original, an AMP page naming the article) joins the story's
  keys: it goes through the story memory as a story key would (normalised, hashed,
  remembered with the source). A canonical URL known already, as another entry's link or
  another page's canonical URL, makes the entry a repeat; one not known yet is remembered,
  so the original's entry, listed later by another feed, is a repeat there at its fetch.
* **Near-duplicate text.** With a threshold s (``WHITTLE_NEAR_DUPLICATES``), an article
  whose text fingerprint (:func:`scrapy_whittle.feeds.article.fingerprint`) agrees with a
  fingerprint seen before on at least a share s of its bits is a repeat: a wire story the
  outlets rewrote a little, under URLs of their own. The fingerprints of the last
  ``capacity`` articles are kept (numpy, one vectorised comparison an article); they are not
  stored in the crawl's state: after a restart the comparison starts afresh.

A repeat found here was counted new at its fetch; the service then takes it back
(:meth:`~scrapy_whittle.service.outcomes.CrawlOutcomes.late_repeat`), so that the policy
learns the feed brought less.
"""

from __future__ import annotations

import numpy as np

from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.service.story_memory import StoryMemory

#: fingerprints kept for the near-duplicate comparison
CAPACITY = 65_536
CANONICAL, NEAR_DUPLICATE = "canonical", "near_duplicate"

_WORDS = 4              # uint64 words of a fingerprint (its BITS = 256 bits)


def _words(fingerprint: int) -> np.ndarray:
    return np.frombuffer(fingerprint.to_bytes(8 * _WORDS, "big"), dtype=">u8").astype(np.uint64)


class NearDuplicates:
    """The last ``capacity`` fingerprints (a ring), and the share of bits ``threshold`` at
    which two are the same story."""

    def __init__(self, threshold: float, capacity: int = CAPACITY) -> None:
        self.threshold, self.capacity = float(threshold), int(capacity)
        self.prints = np.zeros((self.capacity, _WORDS), dtype=np.uint64)
        self.size = 0
        self.next = 0
        #: bits that may differ: at most (1 - threshold) of them
        self.max_bits = int(np.floor((1.0 - self.threshold) * 64 * _WORDS + 1e-9))

    def seen(self, fingerprint: int) -> bool:
        """Whether ``fingerprint`` is a near-duplicate of one kept; kept from now on if not."""
        words = _words(fingerprint)
        if self.size:
            differ = np.bitwise_count(self.prints[:self.size] ^ words).sum(axis=1)
            if int(differ.min()) <= self.max_bits:
                return True
        self.prints[self.next] = words
        self.next = (self.next + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)
        return False


class ArticleStories:
    """The verdict on an article's story (module docstring). ``stories``: the crawl's story
    memory (None with ``WHITTLE_DEDUP = "entry"``: no canonical URLs then); ``threshold``:
    ``WHITTLE_NEAR_DUPLICATES`` (0: texts are not compared)."""

    def __init__(self, stories: StoryMemory | None, threshold: float = 0.0,
                 capacity: int = CAPACITY) -> None:
        self.stories = stories
        self.near = NearDuplicates(threshold, capacity) if threshold else None

    def judge(self, source: int, canonical: str | None, fingerprint: int | None) -> str | None:
        """:data:`CANONICAL` or :data:`NEAR_DUPLICATE` when the article repeats a story
        known, else None (the article is remembered)."""
        verdict = None
        if canonical and self.stories is not None:
            entry = FeedEntry(canonical, None, canonical, None, None)
            _, repeats = self.stories.split(source, [entry])
            if repeats:
                verdict = CANONICAL
        if self.near is not None and fingerprint is not None:
            near = self.near.seen(fingerprint)
            if verdict is None and near:
                verdict = NEAR_DUPLICATE
        return verdict
