from __future__ import annotations

import math
from itertools import pairwise

import pytest

from scrapy_whittle.service.hosts.host_allowances import PROBE_AFTER, PROBE_ANSWERS, HostAllowances


def run_epochs(allow, host, rate, epochs, start=0):
    """Plan each epoch the host's cap (it wants more than any allowance), the host answering
    429 above ``rate`` requests; returns (requests, 429s) over the epochs."""
    sent = refused = 0
    for k in range(start, start + epochs):
        allow.start_epoch(k)
        cap = allow.caps([host])[0]
        want = 10 if math.isinf(cap) else int(cap)
        allow.planned(host, want)
        ok = min(want, rate)
        allow.answered(host, ok)
        sent += min(want, rate + 1)              # the first 429 stops the host's requests
        if want > rate:
            refused += 1
            allow.overloaded(host, observed=want)
    return sent, refused


def test_a_configured_limit_caps_each_epoch_and_fractions_accrue_as_credit():
    allow = HostAllowances({"a.example": 0.5})
    caps = []
    for k in range(6):
        allow.start_epoch(k)
        cap = allow.caps(["a.example", "b.example"])
        caps.append(cap[0])
        assert cap[1] == math.inf
        allow.planned("a.example", int(cap[0]))
    assert caps == [0, 1, 0, 1, 0, 1]


def test_a_rate_limited_host_is_cut_once_per_epoch_and_settles_at_what_it_bears():
    allow = HostAllowances()
    allow.start_epoch(0)
    allow.answered("r.example", 2)
    assert allow.overloaded("r.example", observed=10)
    assert not allow.overloaded("r.example")          # the same epoch: one signal
    assert allow.allowance("r.example") == pytest.approx(5.0 * 1.0)
    assert allow.caps(["r.example"])[0] == 0          # nothing more this epoch
    sent, refused = run_epochs(allow, "r.example", 2, 3 * PROBE_AFTER, start=1)
    assert refused / sent <= 0.01
    assert allow.allowance("r.example") == pytest.approx(2.0, abs=1.0)
    assert "r.example" in allow.throttled()


def test_recovery_is_additive_and_stops_at_the_configured_limit():
    allow = HostAllowances({"a.example": 8.0})
    allow.start_epoch(0)
    allow.answered("a.example", 8)
    allow.overloaded("a.example")
    assert allow.allowance("a.example") == 4.0
    seen = []
    for k in range(1, 10):
        allow.answered("a.example")
        allow.start_epoch(k)
        seen.append(allow.allowance("a.example"))
    # the epoch of the cut gives nothing back; each later good one a little
    assert seen[0] == 4.0 and seen[1] > 4.0 and seen[-1] == 8.0
    assert all(b - a <= 0.8 + 1e-9 for a, b in pairwise(seen))


def test_a_ceiling_guessed_early_in_an_epoch_is_climbed_past_and_a_refused_probe_keeps_it():
    """The case of a crawl with decision steps of a minute, a host bearing 10 an epoch: its
    second refusal comes 60% into an epoch having answered 2, so what it bore reads below
    the cut, and the ceiling is the cut, 7.5. Probes climb past it, one crawl an epoch at a
    time, to what the host bears; the probe it refuses brings the allowance back to that
    ceiling (not half of it), and the next probe waits PROBE_AFTER epochs, so that a host
    bearing more later is found then."""
    allow = HostAllowances()
    allow.start_epoch(0)
    allow.answered("r.example")
    assert allow.overloaded("r.example", observed=30.0, share=0.1)     # (a first cut)
    allow.start_epoch(1)
    allow.answered("r.example", 2)
    assert allow.overloaded("r.example", share=0.6)
    assert allow.hosts["r.example"].ceiling == pytest.approx(7.5)
    allowances, refused = [], []

    def serve(epochs, bears):
        for k in epochs:
            allow.start_epoch(k)
            cap = int(allow.caps(["r.example"])[0])
            allow.planned("r.example", cap)
            allow.answered("r.example", min(cap, bears))
            if cap > bears:
                refused.append(k)
                assert allow.overloaded("r.example", share=0.1)
            allowances.append(allow.allowance("r.example"))

    serve(range(2, 2 + PROBE_AFTER), 10)
    assert refused and allowances[refused[0] - 2] == 10.0    # back to the ceiling found
    assert len(refused) == 1 and allowances[-1] == 10.0      # and held there
    # the climb: from 7.5, a probe after each PROBE_ANSWERS answers, within that many epochs
    assert refused[0] - 2 <= 4 * (PROBE_ANSWERS // 7 + 2), allowances
    serve(range(2 + PROBE_AFTER, 2 + 3 * PROBE_AFTER), 13)  # it bears more now
    assert allowances[-1] == 13.0 and len(refused) <= 3, (refused, allowances[-1])


def test_a_burst_of_403s_reads_as_a_rate_limit_and_rows_round_trip():
    allow = HostAllowances({"f.example": 6.0})
    allow.start_epoch(0)
    assert not allow.forbidden("f.example") and not allow.forbidden("f.example")
    assert allow.forbidden("f.example")
    other = HostAllowances({"f.example": 6.0})
    other.load_rows(allow.rows())
    assert other.allowance("f.example") == allow.allowance("f.example") == 3.0


def test_articles_take_what_the_feeds_leave_of_a_host_s_allowance():
    allow = HostAllowances({"a.example": 10.0})
    allow.start_epoch(0)
    allow.planned("a.example", 6)                  # the epoch's plan: six feeds
    assert [allow.admit_article("a.example") for _ in range(5)] == [True] * 4 + [False]
    allow.start_epoch(1)                           # six feeds last epoch: kept for them
    assert [allow.admit_article("a.example") for _ in range(5)] == [True] * 4 + [False]
    allow.planned("a.example", 6)                  # the plan takes its six all the same
    assert allow.caps(["a.example"]) == [0]
    assert allow.admit_article("b.example")        # a host without an allowance
    delayed = HostAllowances(period=3600.0, default_delay=600.0)     # 6 an epoch
    delayed.start_epoch(0)
    assert sum(delayed.admit_article("c.example") for _ in range(10)) == 6
    # a cluster's planner takes what admit_article would admit, at once, to grant it
    allow.start_epoch(2)
    allow.planned("a.example", 6)
    assert allow.article_room(frozenset({"a.example"})) == {"a.example": 0}   # held
    assert allow.article_room() == {"a.example": 4}
    assert allow.article_room() == {"a.example": 0} and not allow.admit_article("a.example")
