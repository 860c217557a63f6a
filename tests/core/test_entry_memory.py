import json
import pickle

from scrapy_whittle.entry_memory import EntryMemory
from scrapy_whittle.feeds import FeedEntry


def test_entry_memory_dedupes_and_is_bounded():
    mem = EntryMemory(max_per_source=3)
    e = [FeedEntry(key=k, title=None, link=None, published=None, engagement=None)
         for k in "abcde"]
    assert [x.key for x in mem.new_entries(0, [e[0], e[1], e[0]])] == ["a", "b"]  # dup inside
    assert mem.new_entries(0, [e[0], e[1]]) == []
    assert [x.key for x in mem.new_entries(1, [e[0]])] == ["a"]                  # per source
    assert [x.key for x in mem.new_entries(0, [e[2], e[3], e[0]])] == ["c", "d"]
    assert mem.seen(0) == 3                     # "b" left the feed and was forgotten
    assert [x.key for x in mem.new_entries(0, [e[1]])] == ["b"]
    state = json.loads(json.dumps(mem.state_dict()))
    clone = EntryMemory(max_per_source=3)
    clone.load_state_dict(pickle.loads(pickle.dumps(state)))
    assert clone.new_entries(0, [e[1], e[2]]) == mem.new_entries(0, [e[1], e[2]]) == []
    assert clone.new_entries(0, [e[0]]) == mem.new_entries(0, [e[0]]) == [e[0]]   # LRU evicted
    assert clone.new_entries(1, [e[4]]) == mem.new_entries(1, [e[4]])
