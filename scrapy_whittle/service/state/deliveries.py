"""At-least-once delivery of the entries a crawl finds: a write-ahead journal beside the state.

A fetch's new entries are counted as seen at once (the entry memory), and the next checkpoint
stores them so. Their items, though, still have to pass the spider and the item pipelines; a
process killed in between would lose them: the restored state knows them, so a later fetch
does not report them again, and a feed's window may have dropped them by then.

So every batch of new entries (one fetch's) is appended to a journal *before* it is handed
to the spider, and forgotten only once the caller says it was delivered (every item it made
passed the pipelines, or was dropped on purpose) *and* a checkpoint taken after that was
committed. After a restart every batch still in the journal is handed out again: an entry
is delivered at least once, never lost; one delivered after the last checkpoint may be
delivered a second time.

The journal is a set of segments ``JOBDIR/whittle-deliveries/<n>.jsonl``, one JSON line per
batch, written with one ``os.write`` to an ``O_APPEND`` file (no Python buffer to lose: a
killed process's last write is in the kernel's cache; a power cut may lose the writes since
the last sync, like the state's own ``synchronous=NORMAL``). A checkpoint starts a new segment
holding the batches still undelivered; once the checkpoint is committed the older segments go.
A segment is read back line by line: a line cut short by a kill (its batch was not handed out
yet) or damaged is skipped and counted, never fatal.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from scrapy_whittle.feeds.parse import FeedEntry

logger = logging.getLogger("scrapy_whittle.service.recrawl")

DIRECTORY = "whittle-deliveries"


@dataclass(frozen=True)
class Batch:
    """One fetch's new entries on their way to the pipelines: ``id`` (unique in the crawl's
    journal), the source's URL and id, the entries with their values at capture, and when
    they were found (unix seconds)."""

    id: int
    url: str
    source: int
    entries: list[FeedEntry]
    values: list[float]
    found_at: float

    def line(self) -> bytes:
        return (json.dumps({
            "b": self.id, "u": self.url, "s": self.source, "t": self.found_at,
            "v": self.values,
            "e": [[e.key, e.title, e.link, e.published, e.engagement] for e in self.entries],
        }, ensure_ascii=False, separators=(",", ":")) + "\n").encode()

    @classmethod
    def from_line(cls, line: bytes) -> Batch:
        d = json.loads(line)
        entries = [FeedEntry(str(k), t, link, p, g) for k, t, link, p, g in d["e"]]
        values = [float(v) for v in d["v"]]
        if len(values) != len(entries):
            raise ValueError("values and entries differ in length")
        return cls(int(d["b"]), str(d["u"]), int(d["s"]), entries, values, float(d["t"]))


class DeliveryJournal:
    """The journal of a crawl with a state file (``directory``); without one (None) it
    keeps nothing and ``add`` returns None: there is nothing to restart from."""

    def __init__(self, directory: str | Path | None) -> None:
        self.directory = Path(directory) if directory is not None else None
        self.pending: dict[int, Batch] = {}     # added, not delivered
        self.next_id = 1
        self.segment = 0                        # the segment being written
        self._fd: int | None = None
        self.skipped_lines = 0                  # damaged or cut lines read back

    @property
    def enabled(self) -> bool:
        return self.directory is not None

    # -- opening: what a killed run left -----------------------------------------------------
    def recover(self) -> list[Batch]:
        """Open the journal; the batches a previous run left undelivered (oldest first, each
        once), which are pending again until delivered. Starts a new segment holding them."""
        if self.directory is None:
            return []
        self.directory.mkdir(parents=True, exist_ok=True)
        found: dict[int, Batch] = {}
        segments = self._segments()
        for _, path in segments:
            for batch in self._read(path):
                found.setdefault(batch.id, batch)
        if self.skipped_lines:
            logger.warning("delivery journal %s: %d damaged or unfinished lines skipped "
                           "(their entries had not been handed out)", self.directory,
                           self.skipped_lines)
        self.pending = dict(sorted(found.items()))
        self.next_id = max(found, default=0) + 1
        self.segment = max((n for n, _ in segments), default=0)
        self.rotate()
        return list(self.pending.values())

    def _segments(self) -> list[tuple[int, Path]]:
        out = []
        for path in self.directory.glob("*.jsonl"):
            try:
                out.append((int(path.stem), path))
            except ValueError:
                continue                # not ours
        return sorted(out)

    def _read(self, path: Path) -> Iterator[Batch]:
        try:
            data = path.read_bytes()
        except OSError as exc:
            logger.warning("delivery journal segment %s unreadable (%s): skipped", path, exc)
            return
        for line in data.split(b"\n"):
            if not line.strip():
                continue
            try:
                yield Batch.from_line(line)
            except (ValueError, TypeError, KeyError):
                self.skipped_lines += 1

    # -- a crawl's batches ---------------------------------------------------------------------
    def add(self, url: str, source: int, entries: list[FeedEntry], values: list[float],
            found_at: float) -> int | None:
        """Journal one fetch's new entries before they are handed out; the batch's id (None
        without a journal)."""
        if self._fd is None:
            return None
        batch = Batch(self.next_id, url, source, list(entries), list(values), found_at)
        self.next_id += 1
        self._write(batch.line())
        self.pending[batch.id] = batch
        return batch.id

    def delivered(self, batch: int) -> None:
        """Every item of ``batch`` passed the pipelines (or was dropped on purpose)."""
        self.pending.pop(batch, None)

    def rotate(self) -> int:
        """Start a new segment holding the batches still undelivered (at a checkpoint's
        preparation); its number, for :meth:`committed`."""
        if self.directory is None:
            return 0
        self._close_fd()
        self.segment += 1
        path = self.directory / f"{self.segment}.jsonl"
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
        if self.pending:
            self._write(b"".join(b.line() for b in self.pending.values()))
        return self.segment

    def committed(self, segment: int) -> None:
        """The checkpoint prepared when ``segment`` started is committed: the segments before
        it hold nothing the state and ``segment`` do not."""
        if self.directory is None:
            return
        for n, path in self._segments():
            if n < segment:
                path.unlink(missing_ok=True)

    def close(self) -> None:
        """At the crawl's end (after its last checkpoint): an empty journal is removed."""
        self._close_fd()
        if self.directory is None or self.pending:
            return
        for _, path in self._segments():
            path.unlink(missing_ok=True)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
