"""``sim.bench.websub``, small: its ground-truth ledger and its ``faults`` run (a hub that
duplicates, pings with nothing, signs some deliveries badly and grants leases shorter than the
crawl, which is stopped half-way and started again on its JOBDIR)."""

from __future__ import annotations

import math

import pytest
import pytest_twisted

from sim.bench.websub import crawl, hub_spec, parse_args, value_captured

EPOCHS = 30


@pytest_twisted.ensureDeferred
async def test_the_ledger_values_each_entry_once_at_its_first_capture():
    """Without a hub the bench's ledger (each entry valued at its first capture) gives back
    the server's own ledger (each poll's new entries); with a hub every pushed entry is in
    it, at its delivery."""
    args = parse_args(["--horizon", str(EPOCHS)])
    kw = {"n": 30, "budget": 2, "epochs": EPOCHS, "seed": 1}
    plain = await crawl("no-hub", hub=None, **kw)
    assert plain.ledger.pushed == 0 and plain.ledger.polls
    assert value_captured(plain, -math.inf, math.inf) == pytest.approx(
        plain.web.totals()["captured"], rel=1e-9)
    pushed = await crawl("hub", hub=hub_spec(args), **kw)
    by_push = sum(s.get("push/new_items", 0) for s in pushed.stats)
    assert pushed.ledger.pushed > 0 and by_push > 0
    # the entries the crawl emitted are the ledger's (entries the crawl saw first by push
    # are there at their delivery, not at a later poll)
    assert len(pushed.items) == len(pushed.ledger.first)
    assert max(pushed.items.values()) == 1


@pytest_twisted.ensureDeferred
async def test_faults_and_a_restart_emit_nothing_twice_and_count_every_bad_signature():
    args = parse_args(["--horizon", str(EPOCHS)])
    run = await crawl("faults", hub=hub_spec(args, faults=True), restart=True, n=30,
                      budget=2, epochs=EPOCHS, seed=1)
    hub = run.hub
    assert hub["duplicates"] > 0 and hub["spurious"] > 0 and hub["bad_signatures"] > 0, hub
    assert max(run.items.values()) == 1                  # across the restart too
    assert sum(s.get("errors/push_signature", 0) for s in run.stats) == hub["bad_signatures"]
    # leases of a quarter of the crawl: renewed, none expired
    assert hub["subscribed"] > run.topics > 0 and hub["expired"] == 0, hub
    assert hub["active_subscriptions"] == run.topics
    # the second start kept every subscription of the first (same callback, same secret)
    before, after = run.keys
    assert before and before <= after
