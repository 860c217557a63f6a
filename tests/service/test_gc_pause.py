"""The garbage collector around bulk loads (scrapy_whittle.service.state.gc_pause)."""

from __future__ import annotations

import gc

from scrapy_whittle.service.state import gc_pause as bulk


def test_gc_paused_turns_the_collector_off_inside_and_restores_it():
    assert gc.isenabled()
    with bulk.gc_paused():
        assert not gc.isenabled()
        with bulk.gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()                  # nested: still off in the outer block
    assert gc.isenabled()
    gc.disable()
    try:
        with bulk.gc_paused():
            pass
        assert not gc.isenabled()                  # off before: left off
    finally:
        gc.enable()


def test_the_startup_heap_is_frozen_once_per_process(monkeypatch):
    calls = []
    monkeypatch.setattr(bulk, "_frozen", False)
    monkeypatch.setattr(bulk.gc, "collect", lambda: calls.append("collect"))
    monkeypatch.setattr(bulk.gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(bulk.gc, "unfreeze", lambda: calls.append("unfreeze"))
    bulk.freeze_startup_heap()
    bulk.freeze_startup_heap()
    assert calls == ["collect", "freeze"]
    bulk.thaw()                                  # a crawl after: freezes its own heap again
    bulk.freeze_startup_heap()
    assert calls == ["collect", "freeze", "unfreeze", "collect", "collect", "freeze"]
