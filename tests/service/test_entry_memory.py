import json
import os
import pickle
import subprocess
import sys

import numpy as np

from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.service.memory.entry_memory import EntryMemory, entry_hashes


def entries(keys):
    return [FeedEntry(key=str(k), title=None, link=None, published=None, engagement=None)
            for k in keys]


def keys(found):
    return [e.key for e in found]


def test_dedupes_within_a_crawl_and_per_source():
    mem = EntryMemory(2, min_slack=0)
    a, b = entries("ab")
    assert keys(mem.new_entries(0, [a, b, a])) == ["a", "b"]
    assert mem.new_entries(0, [a, b]) == []
    assert keys(mem.new_entries(1, [a])) == ["a"]
    assert mem.seen(0) == 2 and mem.seen(1) == 1


def test_capacity_follows_the_feed_so_a_large_feed_is_never_new_again():
    mem = EntryMemory(1, max_per_source=50_000)
    big = entries(range(20_000))
    assert len(mem.new_entries(0, big)) == 20_000
    assert mem.new_entries(0, big) == []
    fresh = entries(["new"]) + big[:-1]                 # one new entry pushes one out
    assert keys(mem.new_entries(0, fresh)) == ["new"]
    assert mem.new_entries(0, fresh) == []


def test_a_feed_beyond_the_bound_is_read_up_to_it_the_same_entries_each_time():
    mem = EntryMemory(1, max_per_source=100)
    big = entries(range(1000))
    assert keys(mem.new_entries(0, big)) == [str(k) for k in range(100)]
    assert mem.new_entries(0, big) == []
    assert mem.seen(0) == 100


def test_entries_that_leave_the_feed_are_remembered_for_the_slack_then_forgotten():
    mem = EntryMemory(1, min_slack=2)
    window = [str(k) for k in range(3, -1, -1)]      # a feed of 4 entries, newest first:
    mem.new_entries(0, entries(window))              # capacity 4 + 2
    for k in range(4, 7):                            # 3 newer entries push out "0" .. "2"
        window = [str(k), *window[:-1]]
        assert keys(mem.new_entries(0, entries(window))) == [str(k)]
    assert mem.seen(0) == 6                          # "0" was forgotten, "1" and "2" kept
    assert keys(mem.new_entries(0, entries(["2", *window]))) == []     # within the slack
    assert keys(mem.new_entries(0, entries(["0", *window]))) == ["0"]  # forgotten: new again


def test_shown_entries_are_refreshed_least_recently_seen_forgotten_first():
    mem = EntryMemory(1, min_slack=1)
    mem.new_entries(0, entries("abc"))               # newest first; capacity 3 + 1
    mem.new_entries(0, entries("dc"))                # oldest first now: b a c d
    mem.new_entries(0, entries("ec"))                # e new: b (least recently seen) goes
    assert keys(mem.new_entries(0, entries("ac"))) == []
    assert keys(mem.new_entries(0, entries("b"))) == ["b"]


def test_many_sources_relocating_and_compacting_keep_their_hashes():
    rng = np.random.default_rng(0)
    mem = EntryMemory(50, min_slack=1)
    reference: dict[int, list[str]] = {}
    for step in range(600):
        sid = int(rng.integers(50))
        size = int(rng.integers(1, 40)) if step % 7 else 200          # feeds grow at times
        shown = [f"{sid}-{k}" for k in rng.integers(0, 300, size)]
        new = keys(mem.new_entries(sid, entries(shown)))
        old = set(reference.get(sid, []))
        distinct = list(dict.fromkeys(shown))
        assert new == [k for k in distinct if k not in old]
        cap = int(mem.cap[sid])
        kept = [k for k in reference.get(sid, []) if k not in set(distinct)] + distinct[::-1]
        reference[sid] = kept[len(kept) - min(len(kept), cap):]
        assert mem.seen(sid) == len(reference[sid])
    for sid, ref in reference.items():
        np.testing.assert_array_equal(mem.keys(sid), entry_hashes(ref))


def test_sliding_feeds_take_the_short_path_and_match_the_reference():
    """Feeds that mostly slide (new entries on top, the oldest fall off), at times reorder,
    bring an entry back or shrink: the short paths of ``observe`` and the general one must
    remember exactly what the reference model does, capacity included."""
    rng = np.random.default_rng(1)
    slack, bound = 2, 30
    mem = EntryMemory(8, min_slack=slack, max_per_source=bound)
    reference: dict[int, list[str]] = {}
    caps: dict[int, int] = {}
    top = dict.fromkeys(range(8), 0)
    for _ in range(1500):
        sid = int(rng.integers(8))
        width = 5 + sid * 4                                   # 5 .. 33 entries shown
        top[sid] += int(rng.integers(0, 4))
        shown = [f"{sid}-{k}" for k in range(top[sid], max(top[sid] - width, -1), -1)]
        kind = rng.random()
        if kind < 0.05:
            rng.shuffle(shown)                                # a reordered feed
        elif kind < 0.10 and top[sid] > width + 5:
            shown.insert(0, f"{sid}-{top[sid] - width - 3}")  # an old entry comes back
        elif kind < 0.13:
            shown = shown[:2]                                 # a feed that shrank
        new = keys(mem.new_entries(sid, entries(shown)))
        distinct = list(dict.fromkeys(shown))[:bound]
        old = reference.get(sid, [])
        assert new == [k for k in distinct if k not in set(old)]
        caps[sid] = max(caps.get(sid, 0),
                        min(len(distinct) + max(slack, len(distinct) // 8), bound))
        kept = [k for k in old if k not in set(distinct)] + distinct[::-1]
        reference[sid] = kept[max(0, len(kept) - caps[sid]):]
        assert int(mem.cap[sid]) == caps[sid]
        np.testing.assert_array_equal(mem.keys(sid), entry_hashes(reference[sid]))


def test_state_round_trips_through_json_and_the_store_format():
    mem = EntryMemory(3)
    mem.new_entries(0, entries("abc"))
    mem.new_entries(2, entries("xy"))
    state = json.loads(json.dumps(mem.state_dict()))
    clone = EntryMemory(0)
    clone.load_state_dict(pickle.loads(pickle.dumps(state)))
    other = EntryMemory(3)
    other.import_keys([0, 2], mem.export_keys([0, 2]))
    for m in (clone, other):
        assert m.new_entries(0, entries("abcd")) == entries("d")
        assert m.new_entries(2, entries("xyz")) == entries("z")
        assert m.new_entries(1, entries("a")) == entries("a")


def test_stored_hashes_that_are_not_whole_are_cut_to_the_whole_ones():
    # a blob that is not a multiple of 8 bytes (a foreign writer): its whole hashes are kept,
    # and its neighbours' hashes stay aligned
    mem = EntryMemory(3)
    mem.new_entries(0, entries("ab"))
    mem.new_entries(2, entries("xyz"))
    a, c = mem.export_keys([0, 2])
    other = EntryMemory(3)
    other.import_keys([0, 1, 2], [a + b"\x07" * 3, None, c])
    assert other.export_keys([0, 1, 2]) == [a, b"", c]
    assert other.new_entries(2, entries("wxyz")) == entries("w")


def test_hashes_are_the_same_in_another_process():
    code = ("from scrapy_whittle.service.memory.entry_memory import entry_hashes;"
            "print(entry_hashes(['urn:a', 'https://x/1', 'caf\\u00e9']).tolist())")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert json.loads(out) == entry_hashes(["urn:a", "https://x/1", "caf\u00e9"]).tolist()


def test_keys_are_hashed_as_utf8_a_lone_surrogate_included():
    import xxhash

    from scrapy_whittle.service.memory.entry_memory import key_hashes

    got = key_hashes(["é", "b\udc80", "c"])
    assert got == [xxhash.xxh3_64_intdigest("é".encode()),
                   xxhash.xxh3_64_intdigest(b"b\xed\xb2\x80"),
                   xxhash.xxh3_64_intdigest(b"c")]


def test_a_recalled_batch_forgets_nothing_the_memory_held():
    # a journaled batch replayed after a restart: its entries become the most recently seen,
    # and the block grows for them rather than forget the oldest (up to max_per_source)
    mem = EntryMemory(1, max_per_source=30, min_slack=4)
    shown = entries(range(20))
    mem.new_entries(0, shown)                            # capacity 24
    batch = entries(f"b{i}" for i in range(8))
    assert mem.recall(0, batch) == batch
    assert mem.seen(0) == 28
    assert mem.recall(0, batch) == []
    assert mem.new_entries(0, shown + batch) == []     # oldest first: b7 ... b0, 19 ... 0
    assert keys(mem.recall(0, entries(f"c{i}" for i in range(5)))) == [f"c{i}" for i in
                                                                       range(5)]
    assert mem.seen(0) == 30                             # the bound: the oldest 3 go
    assert keys(mem.new_entries(0, batch[5:])) == ["b5", "b6", "b7"]


def test_a_push_forgets_nothing_and_the_next_fetch_gives_the_room_back():
    # a feed of 20 entries listed oldest first (so its oldest remembered ones are those it
    # still shows); a hub pushes only the 6 new ones; the next fetch shows 26 entries
    mem = EntryMemory(1, max_per_source=100, min_slack=4)
    shown = entries(range(20))[::-1]
    mem.new_entries(0, shown)                            # capacity 24
    push = entries(f"p{i}" for i in range(6))
    assert mem.pushed(0, push) == push
    assert mem.seen(0) == 26                             # nothing forgotten for the push
    assert mem.pushed(0, push) == []                     # a duplicate delivery
    assert mem.new_entries(0, shown + push[::-1]) == []  # the poll: nothing new twice
    assert mem.cap[0] == 26 + max(4, 26 // 8)            # the fetch rule's room, no more
    assert mem.lent == {}                                # the lent room is the fetch's now


def test_the_room_a_push_lent_goes_back_to_the_fetch_rule_and_no_lower():
    mem = EntryMemory(1, max_per_source=100, min_slack=4)
    mem.new_entries(0, entries(range(10)))               # capacity 14
    mem.pushed(0, entries(f"p{i}" for i in range(8)))    # 18: lent 4
    assert mem.cap[0] == 18 and mem.lent == {0: 4}
    wide = entries(range(40))                            # a fetch showing 40: needs 45
    mem.new_entries(0, wide)
    assert mem.cap[0] == 45 and mem.lent == {} and mem.seen(0) == 45
    assert mem.used >= mem.live == 45
