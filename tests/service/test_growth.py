"""The service's growing buffers (URL offsets, the entry pool) grow by core.columns' rule."""

from __future__ import annotations

import numpy as np

from scrapy_whittle.service.memory.entry_memory import EntryMemory
from scrapy_whittle.service.sources.registry import SourceRegistry


def test_source_registry_and_entry_memory_grow_one_at_a_time():
    reg = SourceRegistry()
    urls = [f"https://example.com/{i}" for i in range(3000)]
    for u in urls[:1500]:
        reg.add(u)
    ids, new = reg.add_many(urls[1000:])
    assert ids == list(range(1000, 3000)) and new == list(range(500, 2000))
    assert [reg.url(i) for i in (0, 1499, 1500, 2999)] == [urls[0], urls[1499], urls[1500],
                                                          urls[2999]]
    memory = EntryMemory(0)
    for sid in range(2000):
        memory.grow(1)
        memory.import_keys([sid], [np.arange(sid % 7 + 1, dtype="<u8").tobytes()])
    assert memory.pool.shape[0] < 2 * memory.used
    np.testing.assert_array_equal(memory.keys(1999), np.arange(1999 % 7 + 1))
