"""Bulk loading without the cyclic garbage collector.

Reading a million sources (a sources file at start-up, the store at a restore) makes millions
of short-lived tuples and strings, none of them in a reference cycle. CPython's cyclic
collector runs every few hundred allocations and, in its oldest generation, walks every live
object: at a million sources about a fifth of a restore's time went to collections that
could free nothing (measured with ``sim.bench_scheduler --state``). ``gc_paused()`` turns the
collector off for such a block and back on after it (if it was on), as pip and mypy do around
their bulk loads; reference counting still frees everything as usual.
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
