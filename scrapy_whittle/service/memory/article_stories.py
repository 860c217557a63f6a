"""One story counted once by what its article says (``WHITTLE_ARTICLES``): its canonical URL,
and with ``WHITTLE_NEAR_DUPLICATES`` its text.

An entry is judged a repeat at its feed's fetch by its story keys (its link, its URL id:
:mod:`~scrapy_whittle.service.memory.story_memory`). Its article tells more, once fetched:

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
  ``capacity`` articles are kept (numpy, one vectorised comparison an article), with the
  source each came from. An article whose text is exactly one its own source brought before
  is that article again (a batch handed out again after a restart fetches its pages again),
  not a repeat, and is not kept twice.

With a store, the fingerprints are part of the crawl's state: the checkpoint writes those
kept since the previous one (:meth:`NearDuplicates.drain`; the store's ``article_prints``,
as bounded as the ring), a restart reads them back (:meth:`NearDuplicates.load`), so a wire
copy fetched after the restart is known as one. A state file without them (an older crawl's)
starts the comparison afresh.

A repeat found here was counted new at its fetch; the service then takes it back
(:meth:`~scrapy_whittle.service.decisions.outcomes.CrawlOutcomes.late_repeat`), so that the policy
learns the feed brought less.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.service.memory.story_memory import StoryMemory

#: fingerprints kept for the near-duplicate comparison
CAPACITY = 65_536
CANONICAL, NEAR_DUPLICATE = "canonical", "near_duplicate"

_WORDS = 4              # uint64 words of a fingerprint (its BITS = 256 bits)


def _words(fingerprint: int) -> np.ndarray:
    return np.frombuffer(fingerprint.to_bytes(8 * _WORDS, "big"), dtype=">u8").astype(np.uint64)


class NearDuplicates:
    """The last ``capacity`` fingerprints (a ring) and their sources, and the share of bits
    ``threshold`` at which two are the same story."""

    def __init__(self, threshold: float, capacity: int = CAPACITY) -> None:
        self.threshold, self.capacity = float(threshold), int(capacity)
        self.prints = np.zeros((self.capacity, _WORDS), dtype=np.uint64)
        self.sources = np.zeros(self.capacity, dtype=np.int64)
        self.size = 0
        self.next = 0
        #: bits that may differ: at most (1 - threshold) of them
        self.max_bits = int(np.floor((1.0 - self.threshold) * 64 * _WORDS + 1e-9))
        #: the store's number of the next fingerprint kept (one more than the last's)
        self.seq = 0
        #: (seq, source, fingerprint) kept since the last checkpoint (:meth:`drain`)
        self.kept: list[tuple[int, int, int]] = []
        #: whether what is kept is tracked for :meth:`drain` (a crawl without a store: no)
        self.track_changes = True

    def seen(self, fingerprint: int, source: int = -1) -> bool:
        """Whether ``fingerprint``, of an article of ``source``, is a near-duplicate of one
        kept; kept from now on if it is neither that nor the same article again."""
        words = _words(fingerprint)
        if self.size:
            differ = np.bitwise_count(self.prints[:self.size] ^ words).sum(axis=1)
            close = differ <= self.max_bits
            if close.any():
                again = close & (differ == 0) & (self.sources[:self.size] == source)
                if (close & ~again).any():
                    return True
                return False             # the article itself, seen again: kept already
        self._keep(words, source)
        if self.track_changes:
            self.kept.append((self.seq, source, fingerprint))
        self.seq += 1
        return False

    def _keep(self, words: np.ndarray, source: int) -> None:
        self.prints[self.next] = words
        self.sources[self.next] = source
        self.next = (self.next + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    # -- persistence ------------------------------------------------------------------------
    def drain(self) -> tuple[list[tuple[int, int, bytes]], int]:
        """The store rows (seq, source, fingerprint's bytes) of the fingerprints kept since
        the last call, and the seq below which the store forgets them (the ring holds the
        last ``capacity``)."""
        kept, self.kept = self.kept[-self.capacity:], []
        rows = [(seq, source, fp.to_bytes(8 * _WORDS, "big")) for seq, source, fp in kept]
        return rows, self.seq - self.capacity

    def load(self, rows: Iterable[tuple[int, int, bytes]]) -> None:
        """The stored fingerprints (seq, source, bytes), in any order: the last
        ``capacity`` are kept, oldest first (a damaged row is left out)."""
        rows = sorted((r for r in rows if len(r[2]) == 8 * _WORDS), key=lambda r: r[0])
        self.seq = int(rows[-1][0]) + 1 if rows else 0
        rows = rows[-self.capacity:]
        self.prints[:] = 0
        self.size = self.next = 0
        if rows:
            raw = b"".join(r[2] for r in rows)
            n = len(rows)
            self.prints[:n] = np.frombuffer(raw, dtype=">u8").reshape(n, _WORDS)
            self.sources[:n] = [int(r[1]) for r in rows]
            self.size, self.next = n, n % self.capacity
        self.kept = []


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
            near = self.near.seen(fingerprint, source)
            if verdict is None and near:
                verdict = NEAR_DUPLICATE
        return verdict
