"""Which entries of each source were already seen, so that a crawl reports only new ones."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from scrapy_whittle.feeds import FeedEntry


class EntryMemory:
    """The keys of the entries already seen, per source, bounded to the ``max_per_source``
    most recently seen (LRU: a key still shown by the feed is refreshed at every crawl, so it
    is never forgotten before keys that left the feed; keep the bound above the feed's window).
    """

    def __init__(self, max_per_source: int = 1000) -> None:
        if int(max_per_source) < 1:
            raise ValueError(f"max_per_source ({max_per_source!r}) must be >= 1")
        self.max_per_source = int(max_per_source)
        self._seen: dict[int, OrderedDict[str, None]] = {}

    def new_entries(self, source: int, entries: Iterable[FeedEntry]) -> list[FeedEntry]:
        """The entries not seen before (first occurrence of a key inside ``entries`` too), in
        feed order; all of ``entries`` are remembered as seen."""
        seen = self._seen.setdefault(int(source), OrderedDict())
        batch: set[str] = set()
        new: list[FeedEntry] = []
        keys: list[str] = []
        for entry in entries:
            if entry.key in batch:
                continue
            batch.add(entry.key)
            keys.append(entry.key)
            if entry.key not in seen:
                new.append(entry)
        # feeds list newest first: insert oldest first so the newest end up most recent
        for key in reversed(keys):
            seen[key] = None
            seen.move_to_end(key)
        while len(seen) > self.max_per_source:
            seen.popitem(last=False)
        return new

    def seen(self, source: int) -> int:
        return len(self._seen.get(int(source), ()))

    def forget(self, source: int) -> None:
        self._seen.pop(int(source), None)

    def state_dict(self) -> dict[str, Any]:
        return {"max_per_source": self.max_per_source,
                "seen": {str(s): list(keys) for s, keys in self._seen.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._seen = {}
        for s, keys in state["seen"].items():
            od: OrderedDict[str, None] = OrderedDict((str(k), None) for k in keys)
            while len(od) > self.max_per_source:
                od.popitem(last=False)
            self._seen[int(s)] = od

    def __repr__(self) -> str:
        return f"EntryMemory(max_per_source={self.max_per_source})"
