"""What a killed run left undelivered, found in the delivery journal at the next opening
(:class:`~scrapy_whittle.service.state.deliveries.DeliveryJournal`, beside the state store)."""

from __future__ import annotations

import dataclasses
import logging

from scrapy_whittle.service.decisions.epochs import EpochLedger, Timeline
from scrapy_whittle.service.memory.entry_memory import EntryMemory
from scrapy_whittle.service.memory.story_memory import StoryMemory
from scrapy_whittle.service.sources.source_table import SourceTable
from scrapy_whittle.service.state.deliveries import Batch, DeliveryJournal
from scrapy_whittle.service.types import Stats

logger = logging.getLogger(__name__)


def recover_deliveries(journal: DeliveryJournal, *, sources: SourceTable,
                       memory: EntryMemory, stories: StoryMemory | None, ledger: EpochLedger,
                       timeline: Timeline, stats: Stats) -> list[Batch]:
    """The batches a killed run left undelivered in ``journal``, to hand out again, their
    entries known as seen (they are handed out by the replay, not again by the next fetch of
    their feed), beside every entry the checkpoint knew (:meth:`EntryMemory.recall`)."""
    replays = []
    for batch in journal.recover():
        sid = sources.id_of(batch.url)
        if sid is not None:
            new = memory.recall(sid, batch.entries)
            if stories is not None:
                stories.split(sid, new)
            _count_recovered(batch, new, ledger, timeline)
            if sid != batch.source:
                batch = dataclasses.replace(batch, source=sid)
        replays.append(batch)
    if replays:
        logger.info("re-crawl service: %d entries of %d fetches may not have been "
                    "delivered before the crawl stopped (their delivery was not confirmed "
                    "to the state store): handed out again, so the item pipelines may see "
                    "some of them twice", sum(len(b.entries) for b in replays),
                    len(replays))
        stats.inc("deliveries/replayed", sum(len(b.entries) for b in replays))
    return replays


def _count_recovered(batch: Batch, new, ledger: EpochLedger, timeline: Timeline) -> None:
    """``new``: the entries of a journaled batch the checkpoint did not know, found after
    it by the killed run, whose epoch rows counting them were lost with it. They are
    captures all the same (their items go to the pipelines now): counted again in the
    epoch they were found in, so that the report's captured entries are what reached the
    pipelines."""
    if not new:
        return
    keys = {e.key for e in new}
    value = sum(v for e, v in zip(batch.entries, batch.values, strict=False)
                if e.key in keys)
    totals = ledger.totals[timeline.epoch_of(batch.found_at)]
    totals.new_items += len(new)
    totals.utility += float(value)
