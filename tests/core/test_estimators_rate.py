from __future__ import annotations

import numpy as np
import pytest

from scrapy_whittle.core.estimators import RateEstimator


def test_conjugate_update_matches_batch_reference():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 5, 200)
    counts = rng.poisson(3.0, 200).astype(float)
    exposure = rng.uniform(0.1, 2.0, 200)
    est = RateEstimator(5, prior_rate=2.0, prior_exposure=0.5)
    est.update(ids[:120], counts[:120], exposure[:120])
    est.update(ids[120:], counts[120:], exposure[120:])
    a = 1.0 + np.bincount(ids, counts, 5)
    b = 0.5 + np.bincount(ids, exposure, 5)
    np.testing.assert_allclose(est.mean(), a / b)
    np.testing.assert_allclose(est.var(), a / b**2)
    lo, hi = est.interval(0.9)
    assert np.all(lo < est.mean()) and np.all(est.mean() < hi)
    assert est.sample(np.random.default_rng(1)).shape == (5,)


def test_one_observation_is_shrunk_to_the_prior():
    est = RateEstimator(1, prior_rate=1.0, prior_exposure=1.0)
    est.update([0], [0], [1e-3])            # nothing seen over a blink
    assert est.mean()[0] == pytest.approx(1.0 / 1.001)
    est.update([0], [5], [1e-3])            # five items in a blink
    assert est.mean()[0] < 6.0


def test_garbage_is_skipped_and_reported():
    est = RateEstimator(2)
    before = est.state_dict()
    ok = est.update([0, 1, 0, 1], [np.nan, -1, 3, 2], [1.0, 1.0, 0.0, np.inf])
    assert not ok.any()
    for k in ("shape", "rate"):
        np.testing.assert_array_equal(est.state_dict()[k], before[k])
    with pytest.raises(ValueError):
        est.update([2], [1], [1])
    acc, _ = est.observe_crawls([0], [10.0], [0, 1], [5.0])
    assert acc.all()
    acc, _ = est.observe_crawls([0], [9.0], [0, 0], [])      # time went backwards
    assert not acc.any()
    acc, _ = est.observe_crawls([0], [np.nan], [0, 0], [])
    assert not acc.any()


def test_future_publication_times_do_not_set_the_window():
    est = RateEstimator(1, prior_rate=1.0, prior_exposure=1e-6)
    est.observe_crawls([0], [0.0], [0, 0], [])
    # window full, one absurd date in the future: ignored when finding the oldest entry
    acc, missed = est.observe_crawls([0], [10.0], [0, 3], [9.0, 8.0, 1e9], [True])
    assert acc.all()
    assert est.mean()[0] == pytest.approx(3 / 2, rel=1e-3)   # 3 entries over (8, 10]
    assert missed[0] == pytest.approx(1.5 * 8, rel=1e-3)


def _simulate_window(rate, window, interval, crawls, rng):
    """Poisson arrivals, a feed that shows its newest `window` entries, crawled regularly."""
    est = RateEstimator(1, prior_rate=1.0, prior_exposure=1.0)
    est.observe_crawls([0], [0.0], [0, 0], [])
    seen = lost = 0
    naive_count = 0
    for j in range(1, crawls + 1):
        t0, t = (j - 1) * interval, j * interval
        n = rng.poisson(rate * interval)
        times = np.sort(rng.uniform(t0, t, n))[::-1]
        visible = times[:window]
        full = n >= window
        seen += len(visible)
        lost += n - len(visible)
        naive_count += len(visible)
        est.observe_crawls([0], [t], [0, len(visible)], visible, [full])
    return est, lost, naive_count / (crawls * interval)


def test_window_overflow_correction_is_unbiased_and_counts_the_missed():
    rng = np.random.default_rng(3)
    est, lost, naive = _simulate_window(rate=20.0, window=15, interval=1.0, crawls=2000, rng=rng)
    assert naive < 0.8 * 20.0                            # the plain count is badly biased
    assert est.mean()[0] == pytest.approx(20.0, rel=0.03)
    assert est.missed[0] == pytest.approx(lost, rel=0.05)


def test_first_crawl_without_start_counts_from_the_oldest_entry():
    est = RateEstimator(1, prior_rate=1.0, prior_exposure=1e-9)
    est.observe_crawls([0], [10.0], [0, 3], [9.0, 6.0, 4.0])   # window not full
    assert est.mean()[0] == pytest.approx(2 / 6, rel=1e-6)
    est2 = RateEstimator(1, prior_rate=1.0, prior_exposure=1e-9)
    est2.observe_crawls([0], [10.0], [0, 0], [], start=0.0)
    assert est2.mean()[0] == pytest.approx(0.0, abs=1e-9)


def test_a_first_crawl_listing_entries_older_than_the_start_ignores_it():
    """Source 0 lists 20 entries an hour apart, the oldest 19 h before the start (a warm web's
    feed): 19 entries over the 19 h since the oldest, not 20 over the 1 h since the start.
    Source 1's entries all follow the start: 2 over the 10 h since it."""
    est = RateEstimator(2, prior_rate=1.0, prior_exposure=1e-9)
    pub = np.concatenate([1.0 - np.arange(20.0), [9.0, 3.0]])
    est.observe_crawls([0, 1], [1.0, 10.0], [0, 20, 22], pub, start=0.0)
    np.testing.assert_allclose(est.mean(), [19 / 19, 2 / 10], rtol=1e-6)


def test_grow_and_state_round_trip():
    est = RateEstimator(2, prior_rate=[1.0, 2.0])
    est.update([0, 1], [3, 4], [1.0, 2.0])
    est.grow(2, prior_rate=5.0)
    assert est.n == 4 and est.mean()[3] == pytest.approx(5.0)
    clone = RateEstimator(0)
    clone.load_state_dict(est.state_dict())
    np.testing.assert_array_equal(clone.mean(), est.mean())


def test_segment_rows_by_mask_or_by_row_numbers_in_their_order():
    from scrapy_whittle.core.estimators._base import segment_rows

    off = np.array([0, 2, 2, 5, 6])                    # rows [0 1] [] [2 3 4] [5]
    new_off, idx = segment_rows(off, np.array([True, False, True, True]))
    assert new_off.tolist() == [0, 2, 5, 6] and idx.tolist() == [0, 1, 2, 3, 4, 5]
    new_off, idx = segment_rows(off, np.array([3, 0, 1]))
    assert new_off.tolist() == [0, 1, 3, 3] and idx.tolist() == [5, 0, 1]


def test_pushed_entries_count_with_a_poll_but_not_against_a_full_window():
    # 1 entry per unit of time; the previous poll at 0. Pushed since: 90 of the 100; the poll
    # at 100 finds the other 10 (window not full): 100 entries over 100
    est = RateEstimator(2, prior_rate=1.0, prior_exposure=1e-9)
    est.last_time[:] = 0.0
    pub = np.linspace(1.0, 100.0, 10)
    est.observe_crawls([0], [100.0], [0, 10], pub, [False], extra=[90.0])
    assert est.mean()[0] == pytest.approx(1.0, rel=1e-6)
    # a hub that fell at 80: the 20 entries since are all the window shows (full); the 80
    # pushed before were published before its oldest entry: they teach nothing of (80, 100]
    # (counting them over it made the rate 5 times too large)
    pub = np.linspace(81.0, 100.0, 20)
    est.observe_crawls([1], [100.0], [0, 20], pub, [True], extra=[80.0])
    assert est.mean()[1] == pytest.approx(1.0, rel=0.06)
