"""The delivery journal: a fetch's new entries are handed out again after a crash until they
were delivered and a checkpoint after that was committed; damaged journal lines never stop a
crawl."""

from __future__ import annotations

from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.service.clock import SimulatedClock
from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.recrawl import RecrawlService
from scrapy_whittle.service.sources.registry import SourceSpec
from scrapy_whittle.service.state.deliveries import DIRECTORY, Batch, DeliveryJournal
from scrapy_whittle.service.state.store import FILE_NAME, SqliteStateStore

START = 1_700_000_000.0


def entry(key: str, published: float | None = START, engagement: float | None = None):
    return FeedEntry(key=key, title=f"title {key} é", link=f"http://127.0.0.1/{key}",
                     published=published, engagement=engagement)


def test_a_batch_reads_back_as_written():
    batch = Batch(7, "http://h/feed", 3, [entry("a"), entry("b", None, 12.0)], [1.0, 0.5],
                  START + 1)
    assert Batch.from_line(batch.line()) == batch


def test_undelivered_batches_come_back_once_each_and_delivered_ones_go(tmp_path):
    journal = DeliveryJournal(tmp_path)
    assert journal.recover() == []
    a = journal.add("http://h/a", 0, [entry("1")], [1.0], START)
    b = journal.add("http://h/b", 1, [entry("2")], [1.0], START)
    journal.delivered(a)
    seg = journal.rotate()                # a checkpoint prepared: b still on its way
    c = journal.add("http://h/a", 0, [entry("3")], [1.0], START)
    journal.committed(seg)
    # killed here: nothing closed
    again = DeliveryJournal(tmp_path)
    assert [x.id for x in again.recover()] == [b, c]
    again.delivered(b)
    d = again.add("http://h/c", 2, [entry("4")], [1.0], START)
    assert d > c                          # ids never repeat
    again.committed(again.rotate())
    third = DeliveryJournal(tmp_path)
    assert [x.id for x in third.recover()] == [c, d]


def test_a_checkpoint_not_committed_keeps_every_older_segment(tmp_path):
    journal = DeliveryJournal(tmp_path)
    journal.recover()
    a = journal.add("http://h/a", 0, [entry("1")], [1.0], START)
    journal.rotate()                      # prepared, never committed
    journal.delivered(a)
    journal.rotate()
    assert [x.id for x in DeliveryJournal(tmp_path).recover()] == [a]


def test_a_cut_or_damaged_line_is_skipped_and_counted(tmp_path):
    journal = DeliveryJournal(tmp_path)
    journal.recover()
    a = journal.add("http://h/a", 0, [entry("1")], [1.0], START)
    path = tmp_path / f"{journal.segment}.jsonl"
    with open(path, "ab") as f:
        f.write(b'{"b": 9, "u": "http://h/x", "s"')          # a kill mid-line
        f.write(b"\nnot json at all\n")
    again = DeliveryJournal(tmp_path)
    assert [x.id for x in again.recover()] == [a]
    assert again.skipped_lines == 2


def test_a_clean_close_with_everything_delivered_leaves_no_journal(tmp_path):
    journal = DeliveryJournal(tmp_path)
    journal.recover()
    journal.delivered(journal.add("http://h/a", 0, [entry("1")], [1.0], START))
    journal.committed(journal.rotate())
    journal.close()
    assert list(tmp_path.glob("*.jsonl")) == []


def test_without_a_state_file_nothing_is_journaled():
    journal = DeliveryJournal(None)
    assert journal.recover() == []
    assert journal.add("http://h/a", 0, [entry("1")], [1.0], START) is None


def _service(tmp_path, clock):
    # one plan an epoch: these tests count in epochs (the default's steps: test_steps.py)
    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": 2, "WHITTLE_PERIOD": 600.0,
                                          "WHITTLE_STEP": 600.0,
                                          "WHITTLE_POLICY": "round_robin"})
    service = RecrawlService(config, clock=clock, store=SqliteStateStore(tmp_path / FILE_NAME))
    service.journal_deliveries = True
    service.open([SourceSpec(url=f"https://s{i}.example/feed.xml") for i in range(2)])
    return service


def test_the_service_hands_out_again_what_a_killed_run_had_not_delivered(tmp_path):
    clock = SimulatedClock(start=START)
    service = _service(tmp_path, clock)
    first = service.feed_fetched(service.next_crawl(), [entry("x"), entry("y")])
    delivered = service.feed_fetched(service.next_crawl(), [entry("z")])
    service.delivered(delivered.batch)
    service.checkpoint()                   # x, y and z are seen in the stored state, and
    assert first.batch is not None         # the items of x and y never reached the pipelines
    assert service.next_crawl() is None    # the epoch's budget is spent
    clock.advance_to(service.wake_at)
    crawl = service.next_crawl()
    late = service.feed_fetched(crawl, [entry("w")])      # found after the checkpoint
    # killed: no close. The next run restores the checkpoint and hands out x, y and w again
    restored = _service(tmp_path, SimulatedClock(start=clock.now()))
    assert {b.id for b in restored.replays} == {first.batch, late.batch}
    assert {e.key for b in restored.replays for e in b.entries} == {"x", "y", "w"}
    assert restored.stats.get("deliveries/replayed") == 3
    # w is known as seen: the replay hands it out, not the next fetch of its feed
    sid = restored.source_id(crawl.url)
    assert restored.memory.new_entries(sid, [entry("w"), entry("v")]) == [entry("v")]
    # delivered and checkpointed, the replays are gone for good
    for batch in restored.replays:
        restored.delivered(batch.id)
    restored.close()
    # w, found after the checkpoint, is a capture of its epoch in the store as x, y, z are
    # (the killed run's rows for it were lost): the report counts what reached the pipelines
    from scrapy_whittle.report import load_report

    assert int(load_report(tmp_path).epochs["new_items"].sum()) == 4
    assert list((tmp_path / DIRECTORY).glob("*.jsonl")) == []
    assert _service(tmp_path, SimulatedClock(start=clock.now())).replays == []


def _one_feed(tmp_path, clock):
    # WHITTLE_DEDUP "entry": what is new is the entry memory's word alone
    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": 1, "WHITTLE_PERIOD": 600.0,
                                          "WHITTLE_STEP": 600.0,
                                          "WHITTLE_POLICY": "round_robin",
                                          "WHITTLE_DEDUP": "entry"})
    service = RecrawlService(config, clock=clock, store=SqliteStateStore(tmp_path / FILE_NAME))
    service.journal_deliveries = True
    service.open([SourceSpec(url="https://s.example/feed.xml")])
    return service


def _fetch(service, clock, entries):
    crawl = service.next_crawl()
    if crawl is None:
        clock.advance_to(service.wake_at)
        crawl = service.next_crawl()
    return service.feed_fetched(crawl, entries)


def test_the_replay_forgets_none_of_the_entries_the_checkpoint_held(tmp_path):
    # The checkpoint remembers the feed's 20 entries; after it, a fetch finds 20 new ones;
    # the run is killed before either batch is delivered. Restored, the memory knows the
    # checkpoint's entries and every replayed one: the replay hands out what was seen before
    # the kill, it is no fetch that shows which entries left the feed.
    clock = SimulatedClock(start=START)
    service = _one_feed(tmp_path, clock)
    old, new = [entry(f"a{i}") for i in range(20)], [entry(f"b{i}") for i in range(20)]
    assert len(_fetch(service, clock, old).entries) == 20
    service.checkpoint()
    assert len(_fetch(service, clock, new).entries) == 20
    restored = _one_feed(tmp_path, SimulatedClock(start=clock.now()))
    assert sum(len(b.entries) for b in restored.replays) == 40
    assert restored.memory.new_entries(0, old + new) == []


def test_an_oldest_first_feed_reports_nothing_twice_after_a_replay(tmp_path):
    # A feed listing its entries oldest first, 20 at a time. Its entries delivered and
    # checkpointed, a fetch finds 6 new ones (the feed's 6 oldest leave it) and the run is
    # killed before their items are delivered: the restored run hands out those 6 again, and
    # its next fetch of the unchanged feed finds nothing new (no entry delivered before the
    # checkpoint is emitted again).
    clock = SimulatedClock(start=START)
    service = _one_feed(tmp_path, clock)
    shown = [entry(f"a{i}") for i in range(20)]
    first = _fetch(service, clock, shown)
    service.delivered(first.batch)
    service.checkpoint()
    shown = shown[6:] + [entry(f"b{i}") for i in range(6)]
    assert [e.key for e in _fetch(service, clock, shown).entries] == [f"b{i}" for i in range(6)]
    restored = _one_feed(tmp_path, SimulatedClock(start=clock.now()))
    assert [e.key for b in restored.replays for e in b.entries] == [f"b{i}" for i in range(6)]
    assert _fetch(restored, restored.clock, shown).entries == []
