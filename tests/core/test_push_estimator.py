"""PushReliability: the share of new entries a hub pushes, their lateness, a silent hub (one
that pings with nothing new among them)."""

from __future__ import annotations

import numpy as np
import pytest

from scrapy_whittle.core.estimators import PushReliability


def feed(est: PushReliability, loss: np.ndarray, entries: int, rng, *, late_mean=0.01,
         start: float = 0.0, batch: int = 10) -> float:
    """Generated evidence: every source publishes ``entries`` entries, one per unit of time;
    each is pushed (lateness exponential) with probability 1 - loss, else first seen by a
    poll made every ``batch`` units. Returns the time reached."""
    n = loss.shape[0]
    t = start
    for _ in range(entries // batch):
        pub = t + np.arange(batch, dtype=np.float64)
        pushed = rng.uniform(size=(n, batch)) >= loss[:, None]
        for j in range(batch):
            src = np.flatnonzero(pushed[:, j])
            late = rng.exponential(late_mean, src.shape[0])
            est.update_pushes(src, pub[j] + late, np.ones(src.shape[0]),
                              np.arange(src.shape[0] + 1), late)
        t += batch
        counts = (~pushed).sum(axis=1)
        off = np.concatenate([[0], np.cumsum(counts)])
        published = np.concatenate([pub[~pushed[i]] for i in range(n)])
        est.update_polls(np.arange(n), np.full(n, t), off, published)
    return t


def test_no_push_history_is_a_source_that_does_not_push():
    est = PushReliability(3)
    assert np.all(est.mean() == 0.0)
    assert np.all(est.reliability_at(np.arange(3), 100.0, np.ones(3)) == 0.0)
    # polls alone never make a source a pusher
    est.update_polls([0], [5.0], [0, 3], [1.0, 2.0, 3.0])
    assert est.share_at([0])[0] == 0.0


def test_share_converges_to_the_delivered_share():
    rng = np.random.default_rng(7)
    loss = np.linspace(0.0, 0.6, 25)
    est = PushReliability(25, memory=1e6)
    feed(est, loss, 600, rng)
    assert np.max(np.abs(est.mean() - (1 - loss))) < 0.08
    # the estimate follows the loss rate, not the prior: monotone on average
    assert np.corrcoef(est.mean(), loss)[0, 1] < -0.95


def test_share_follows_a_hub_that_degrades():
    rng = np.random.default_rng(3)
    est = PushReliability(10, memory=100.0)
    t = feed(est, np.full(10, 0.05), 400, rng)
    good = est.mean().copy()
    feed(est, np.full(10, 0.7), 400, rng, start=t)
    assert np.all(good > 0.85)
    assert np.all(np.abs(est.mean() - 0.3) < 0.15)


def test_lateness_is_learned_and_recent_entries_are_censored():
    rng = np.random.default_rng(1)
    est = PushReliability(4, memory=1e6)
    feed(est, np.full(4, 0.2), 400, rng, late_mean=0.05)
    mean, std = est.lateness_at(np.arange(4))
    assert np.all(np.abs(mean - 0.05) < 0.01)
    assert np.all(np.abs(std - 0.05) < 0.015)
    before = est.polled.copy()
    # an entry a poll saw 0.01 after its publication may still be on its way: not a miss
    est.update_polls([0], [1000.0], [0, 1], [1000.0 - 0.01])
    assert est.polled[0] == before[0]
    est.update_polls([1], [1000.0], [0, 1], [1000.0 - 5.0])
    assert est.polled[1] > before[1]


def test_a_silent_hub_is_detected_and_a_push_ends_it():
    rng = np.random.default_rng(2)
    est = PushReliability(2)
    t = feed(est, np.full(2, 0.1), 200, rng)           # one entry per unit of time
    ids, rate = np.arange(2), np.ones(2)
    last = est.last_push.copy()
    assert not est.silent_at(ids, t, rate).any()
    assert np.all(est.reliability_at(ids, t, rate) > 0.8)
    # 20 units without a push where ~18 pushed entries were due
    assert est.silent_at(ids, last.max() + 20.0, rate).all()
    assert np.all(est.reliability_at(ids, last.max() + 20.0, rate) < 1e-6)
    # a slow source (a tenth of the rate) is not silent after the same time
    assert not est.silent_at(ids, last.max() + 20.0, rate / 10).any()
    # pings that bring nothing do not make it speak again; a useful push does
    est.update_pushes([0, 1], [last.max() + 19.0] * 2, [0, 0])
    assert est.silent_at(ids, last.max() + 20.0, rate).all()
    est.update_pushes([0], [last.max() + 20.0], [1])
    assert est.reliability_at(ids, last.max() + 20.0, rate)[0] > 0.8


def test_a_hub_that_pings_with_nothing_new_is_silent_and_one_that_also_delivers_is_not():
    """Source 0's hub pings ten times an entry with nothing new and still delivers every
    entry; source 1's turns liar: it keeps pinging, with nothing new, while its source
    publishes. The pings are no evidence either way: the first keeps its trust, the second's
    silence counts from its last useful push."""
    rng = np.random.default_rng(4)
    est = PushReliability(2)
    t = feed(est, np.full(2, 0.1), 100, rng)           # one entry per unit of time
    ids, rate = np.arange(2), np.ones(2)
    for k in range(30):
        now = t + k
        est.update_pushes(np.repeat([0, 1], 10), np.tile(now + np.arange(10) / 10, 2),
                          np.zeros(20))
        est.update_pushes([0], [now + 0.95], [1])       # source 0's entry of this unit
    now = t + 30.0
    assert est.reliability_at(ids, now, rate)[0] > 0.8
    assert est.silent_at(ids, now, rate).tolist() == [False, True]
    assert est.reliability_at(ids, now, rate)[1] < 1e-6
    assert est.share_at(ids)[1] > 0.5          # what it delivered before is kept


def test_garbage_is_skipped_and_bad_state_reset():
    est = PushReliability(2)
    ok = est.update_pushes([0, 0, 1], [np.nan, 1.0, 2.0], [1, -1, 2])
    assert ok.tolist() == [False, False, True]
    assert est.pending[0] == 0.0 and est.pending[1] == 2.0
    est.pushed[1] = np.inf
    assert est.invalid([0, 1]).tolist() == [False, True]
    est.reset([1])
    assert est.pushed[1] == 0.0 and np.isnan(est.last_push[1])
    with pytest.raises(ValueError):
        est.update_polls([0, 0], [1.0, 2.0], [0, 0, 0], [])
    with pytest.raises(ValueError):
        PushReliability(1, min_censor_age=-1.0)


def test_a_poll_returns_the_pushes_since_the_previous_one():
    est = PushReliability(2)
    est.update_pushes([0, 0, 1], [1.0, 2.0, 3.0], [2, 1, 0])
    ok, pushed = est.update_polls([0, 1], [4.0, 4.0], [0, 0, 0], [])
    assert ok.all() and pushed.tolist() == [3.0, 0.0]
    assert est.update_polls([0], [5.0], [0, 0], [])[1].tolist() == [0.0]
    # a poll rejected (no usable time) leaves the pushes for the next one
    est.update_pushes([1], [6.0], [2])
    ok, pushed = est.update_polls([1], [np.nan], [0, 0], [])
    assert not ok[0] and pushed[0] == 0.0 and est.pending[1] == 2.0


def test_pushes_no_poll_checked_are_no_evidence_of_reliability():
    # a hub that loses a tenth: the source is polled once, at its first look, then pushes
    # for a long time; what it lost only a poll can show, so p stays where the checked
    # evidence put it (the prior p = 0 here), not at pushed / (pushed + 1)
    rng = np.random.default_rng(11)
    est = PushReliability(1)
    est.update_polls([0], [0.0], [0, 3], [-3.0, -2.0, -1.0])
    for t in range(1, 200):
        if rng.uniform() >= 0.1:
            est.update_pushes([0], [t + 0.01], [1], [0, 1], [0.01])
    assert est.pending[0] > 150
    assert est.share_at([0])[0] == 0.0
    # the next poll checks them with the misses it finds: about 0.9
    lost = 199 - est.pending[0]
    est.update_polls([0], [200.0], [0, int(lost)], 100.0 + np.arange(int(lost)))
    assert abs(est.share_at([0])[0] - 0.9) < 0.05


def test_a_pusher_no_poll_checked_starts_from_the_pooled_share():
    # sources 0-9 checked (a hub that loses a fifth); source 10 pushes, never polled since
    # its pushes began: its share is the others' pooled one, not pushed / (pushed + 1);
    # source 11's hub only pinged (nothing new): it is not trusted at all
    rng = np.random.default_rng(12)
    est = PushReliability(12, memory=1e6)
    feed(est, np.full(10, 0.2), 300, rng)
    for t in range(300):
        est.update_pushes([10], [t + 0.5], [1])
    est.update_pushes([11], [1.0], [0])
    pooled = est.pooled_share()
    assert abs(pooled - 0.8) < 0.03
    share = est.share_at([10, 11])
    assert share[0] == pytest.approx(pooled) and share[1] == 0.0


def test_a_poll_checks_the_pushes_only_as_far_back_as_its_feed_listed():
    # 100 entries since the previous poll at t = 0, 90 pushed from t = 10 on (the first push:
    # the hub's deliveries begin); the feed lists its newest 20, of which 2 are the hub's
    # misses: the older entries were not checked, their pushes are no evidence (counting all
    # 90 against the 2 misses seen would give p = 0.97); the span checked is (80, 100] of
    # the pushes' (10, 100]
    est = PushReliability(1)
    est.update_pushes(np.zeros(90), 10.0 + np.arange(90), np.ones(90))
    _, pushed = est.update_polls([0], [100.0], [0, 3], [5.0, 95.0, 99.0], since=[0.0],
                                 listed_from=[80.0])
    assert pushed[0] == 90.0
    # (the entry published at 5, before the first push, is no miss of the hub's)
    assert est.pushed[0] == pytest.approx(20.0) and est.polled[0] == 2.0
    # unknown (NaN) times: the whole span counts
    est.update_pushes([0], [150.0], [10])
    est.update_polls([0], [150.0], [0, 0], [], since=[100.0], listed_from=[np.nan])
    assert est.pushed[0] > 20.0 * np.exp(-10 / est.memory) + 9.99


def test_state_round_trips():
    rng = np.random.default_rng(5)
    est = PushReliability(3)
    feed(est, np.array([0.1, 0.3, 0.5]), 50, rng)
    copy = PushReliability(0)
    copy.load_state_dict(est.state_dict())
    assert np.array_equal(copy.mean(), est.mean())
    assert np.array_equal(copy.last_push, est.last_push)


def test_a_state_saved_before_first_push_was_kept_loads_and_counts_every_miss():
    est = PushReliability(1)
    est.update_pushes([0], [10.0], [3])
    rows = est.export_rows([0])
    old = rows[[name for name in rows.dtype.names if name != "first_push"]]
    copy = PushReliability(1)
    copy.import_rows([0], old)
    assert copy.pending[0] == 3.0 and np.isnan(copy.first_push[0])
    # the time its pushes began is unknown: every miss a poll finds counts
    copy.update_polls([0], [20.0], [0, 2], [1.0, 15.0])
    assert copy.polled[0] == 2.0 and copy.pushed[0] == 3.0


def shared_hub(est: PushReliability, rate: np.ndarray, until: float, rng, *, loss=0.1,
               down_at=np.inf, poll_every=10.0, step=0.1, check=None) -> None:
    """Sources publishing Poisson(``rate``) entries per unit of time through one hub that
    loses ``loss`` of them and delivers nothing published from ``down_at`` on (0.01 late);
    every source polled every ``poll_every``. Time goes by ``step``; ``check(t)`` is called
    after each."""
    n = rate.shape[0]
    pub = [np.sort(rng.uniform(0.0, until, rng.poisson(r * until))) for r in rate]
    pushed = [(rng.uniform(size=p.shape[0]) >= loss) & (p < down_at) for p in pub]
    src = np.concatenate([np.full(int(d.sum()), i) for i, d in enumerate(pushed)])
    when = np.concatenate([p[d] for p, d in zip(pub, pushed, strict=True)]) + 0.01
    order = np.argsort(when, kind="stable")
    src, when = src[order], when[order]
    last_poll, done = 0.0, 0
    for t in np.arange(step, until + step / 2, step):
        upto = int(np.searchsorted(when, t, side="right"))
        if upto > done:
            k = upto - done
            est.update_pushes(src[done:upto], when[done:upto], np.ones(k), np.arange(k + 1),
                              np.full(k, 0.01))
            done = upto
        if t - last_poll >= poll_every - 1e-9:
            missed = [p[~d & (p > last_poll) & (p <= t)] for p, d in zip(pub, pushed, strict=True)]
            off = np.concatenate([[0], np.cumsum([m.shape[0] for m in missed])])
            est.update_polls(np.arange(n), np.full(n, t), off, np.concatenate(missed),
                             since=np.full(n, last_poll))
            last_poll = t
        if check is not None:
            check(t)


def test_a_fallen_hub_s_slow_and_fast_pushers_are_judged_failed_within_two_intervals():
    # 20 sources through one hub; source 0 publishes every 10 units and is polled every 11
    # without push, source 1 publishes 2 per unit and is polled every 2 without push. The old
    # rule (5 pushed entries expected since the last push) gave the slow one 55 units
    rng = np.random.default_rng(5)
    rate = np.concatenate([[0.1, 2.0], rng.uniform(0.1, 1.0, 18)])
    usual = {0: 11.0, 1: 2.0}
    est = PushReliability(20)
    judged = {}

    def check(t):
        silent = est.silent_at(np.arange(20), t, rate)
        for i in usual:
            if silent[i] and t > 500.0:
                judged.setdefault(i, t)

    shared_hub(est, rate, 560.0, rng, down_at=500.0, check=check)
    for i, interval in usual.items():
        assert judged[i] - 500.0 <= 2 * interval, (i, judged.get(i))


def test_a_working_hub_s_normal_gaps_are_seldom_judged_a_failure():
    # the rule is judged at a posterior of a half, whose odds are (h / Lambda p) e^(Lambda p t)
    # for a silence t: a working source's gap reaches it with probability h / (Lambda p), one
    # alarm per 1 / h units of time on average (h = failure_rate); the others' silence
    # together, once more. So about 2 h alarms per source and unit of time
    rng = np.random.default_rng(6)
    rate = rng.uniform(0.05, 2.0, 20)
    est = PushReliability(20)                       # h = failure_rate = 1e-3 by default
    was = np.zeros(20, dtype=bool)
    alarms = [0]

    def check(t):
        silent = est.silent_at(np.arange(20), t, rate)
        alarms[0] += int((silent & ~was).sum())
        was[:] = silent

    shared_hub(est, rate, 2000.0, rng, check=check)
    # 40,000 source-units of time: about 80 alarms expected
    assert alarms[0] / (20 * 2000.0) < 3 * 1e-3, alarms[0]
