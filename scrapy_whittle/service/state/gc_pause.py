"""The cyclic garbage collector around bulk loads, and the start-up heap out of its way.

Reading a million sources (a sources file at start-up, the store at a restore) makes millions
of short-lived tuples and strings, none of them in a reference cycle. CPython's cyclic
collector runs every few hundred allocations and, in its oldest generation, walks every live
object: at a million sources about a fifth of a restore's time went to collections that
could free nothing (measured with ``sim.bench scheduler --state``). ``gc_paused()`` turns the
collector off for such a block and back on after it (if it was on), as pip and mypy do around
their bulk loads; reference counting still frees everything as usual. Once the crawl is
open, ``freeze_startup_heap()`` keeps what start-up built out of every later full collection.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off inside the block (nested blocks are fine)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def freeze_startup_heap() -> None:
    """Move every object alive now (Scrapy, Twisted, the modules, the crawl's tables) out of
    the collector's sight (``gc.freeze``), after one collection.

    A crawl's full (oldest-generation) collections walk every tracked object; the start-up heap
    is most of them and never becomes garbage. On a web of feeds with thousands of short-lived
    entries (``sim.bench soak``) full collections come often, find almost nothing, and make most of
    the event loop's long stalls. Frozen objects are still freed by reference counting; only
    cycles among them would stay (``gc.unfreeze()`` gives them back). Once per process: the
    first crawl opened holds the start-up heap (a process running many crawls, a test session,
    does not pay a full collection per crawl, nor freeze the garbage of earlier ones)."""
    global _frozen
    if _frozen:
        return
    _frozen = True
    gc.collect()
    gc.freeze()


def thaw() -> None:
    """Undo :func:`freeze_startup_heap` (and let the next crawl opened freeze again): for a
    process that runs crawls one after another and wants each to start as in a fresh
    process (``sim.bench scheduler``), the frozen objects of a finished crawl collected."""
    global _frozen
    _frozen = False
    gc.unfreeze()
    gc.collect()


_frozen = False
