"""A host that answers 429 above one request a minute (``sim.serve --rate-limit``), crawled
by Scrapy with the add-on on the simulated clock (``sim.bench.hosts``, small): the host's
limit is found by a couple of refusals, not one per feed, its crawls are then paced within
what it bears, and its feeds get the allowance the throttle leaves them; with one plan an
epoch (its crawls leaving at once) and with the default's decision steps (paced from the
start)."""

from __future__ import annotations

import pytest
import pytest_twisted

from sim.bench.hosts import crawl


@pytest_twisted.ensureDeferred
@pytest.mark.parametrize("step", [600.0, None], ids=["one-plan-an-epoch", "default-steps"])
async def test_a_rate_limited_host_is_found_once_then_paced_and_used(step):
    # 10 feeds on the limited host (it bears 10 crawls an epoch of 10 minutes), 10 on
    # another; a budget of 16 an epoch wants more of the limited host than it bears
    run = await crawl(feeds=10, others=10, per_minute=1, budget=16, period=600.0,
                      epochs=36, seed=0, settings={} if step is None else {"WHITTLE_STEP": step})
    assert run.cut_epoch == 0, run               # found in the first epoch,
    # by two refusals at most (one plan: slow start, one request, then two at once, both
    # refused; steps: one, the host's requests being spread), not one per feed
    assert run.refused - run.refused_after_cut == (2 if step else 1), run
    # then paced: a refusal only when the allowance grows past the rate, and it cuts again
    assert run.refused_after_cut <= run.cuts - 1, run
    assert run.allowance <= run.bearable, run
    assert run.after_cut >= 30, run              # (not a starved host)
    if step:
        assert run.allowance_used >= 0.9, run    # the host's feeds get its allowance
    else:
        # every minute the index asks for less of the host than it bears: what it plans
        # of the host gets through
        assert run.answered_after_cut >= 0.9 * run.planned_after_cut, run
