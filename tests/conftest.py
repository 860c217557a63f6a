from __future__ import annotations

import pytest

from tests.processes import kill_leftovers


@pytest.fixture(autouse=True)
def no_process_left():
    """A test that fails before it stops the processes it started kills them."""
    yield
    kill_leftovers()
