"""The feed window in the index (scrapy_whittle.core.window) against independent references:
a quadrature of its defining integral, the paper's index without a window, and a replay of
Poisson arrivals through a window."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scrapy_whittle.core.dynamics import alpha_u, geometric_sum
from scrapy_whittle.core.index import whittle_index
from scrapy_whittle.core.window import (
    captured_in_window,
    continuous_index,
    filling,
    index_at_state,
    listed_probability,
    steps_to_state,
    window_index,
    window_share,
)


def poisson_below(w: int, y: float) -> float:
    """P(Poisson(y) < w), summed term by term."""
    return sum(math.exp(-y) * y**m / math.factorial(m) for m in range(w))


@pytest.mark.parametrize("tau", [0.25, 2.0, 6.0, 9.0, 40.0])
@pytest.mark.parametrize(("rate", "decay", "w"), [(3.0, math.log(2), 20), (12.0, 0.1, 5),
                                                  (0.5, 0.0, 3)])
def test_captured_value_is_the_integral_of_what_stays_listed(tau, rate, decay, w):
    a = np.linspace(0.0, tau, 40001)
    listed = np.array([poisson_below(w, rate * t) for t in a])
    reference = 2.0 * rate * np.trapezoid(np.exp(-decay * a) * listed, a)
    assert captured_in_window(tau, rate, 2.0, decay, w) == pytest.approx(reference, rel=1e-6)


def test_captured_value_is_what_a_replay_of_poisson_arrivals_finds():
    rng = np.random.default_rng(7)
    rate, decay, w, tau = 4.0, 0.3, 6, 3.0
    total = 0.0
    runs = 20000
    for _ in range(runs):
        times = np.sort(rng.uniform(0.0, tau, rng.poisson(rate * tau)))
        ages = tau - times[-w:]                  # the feed lists the newest w
        total += float(np.exp(-decay * ages).sum())
    assert captured_in_window(tau, rate, 1.0, decay, w) == pytest.approx(total / runs,
                                                                         rel=0.02)


def test_without_a_window_it_is_the_papers_state_and_index():
    rate, value, decay, period = 2.0, 1.5, 0.4, 0.5
    alpha, u = alpha_u(rate * value, decay, period)
    for k in (1, 2, 5, 30):
        x_k = u * geometric_sum(k, math.log(alpha), 1 - alpha)
        assert captured_in_window(k * period, rate, value, decay, np.nan) == pytest.approx(x_k)
        assert window_index(k, period, rate, value, decay, np.nan) == pytest.approx(
            whittle_index(x_k, alpha, u))
        # a window so large it cannot fill changes nothing either
        assert window_index(k, period, rate, value, decay, 10_000) == pytest.approx(
            whittle_index(x_k, alpha, u))


def test_a_full_window_saturates_the_value_and_raises_the_index_to_it():
    rate, decay, w = 10.0, 0.01, 5                # five entries listed, two an hour kept
    f = captured_in_window(np.array([1.0, 10.0, 100.0]), rate, 1.0, decay, w)
    assert f[1] == pytest.approx(f[2], rel=1e-3)  # nothing more to find once it overflowed
    assert f[2] < w
    k = np.array([1.0, 5.0, 50.0])
    windowed = window_index(k, 0.1, rate, 1.0, decay, w)
    free = window_index(k, 0.1, rate, 1.0, decay, np.nan)
    assert windowed[-1] > free[-1]                # waiting only loses entries: urgent
    assert windowed[-1] == pytest.approx(captured_in_window(5.0, rate, 1.0, decay, w),
                                         rel=1e-2)


def test_the_index_at_a_state_is_the_index_of_the_window():
    rate, value, decay, period, w = 5.0, 1.0, 0.7, 0.25, 8
    alpha, u = alpha_u(rate * value, decay, period)
    k = np.arange(1.0, 30.0)
    x_k = u * geometric_sum(k, np.log(alpha), 1 - alpha)
    assert index_at_state(k, x_k, u, decay, period, rate, w) == pytest.approx(
        window_index(k, period, rate, value, decay, w))
    # the age at which the source holds x_k is k; at or above u* none: there the index is x
    # times the share a full window keeps, the limit of the index on the visited states
    assert steps_to_state(x_k, u, decay, period) == pytest.approx(k)
    ustar = u / (1 - alpha)
    assert np.isinf(steps_to_state([ustar, 2 * ustar], u, decay, period)).all()
    full = index_at_state(np.inf, [ustar, 2 * ustar], u, decay, period, rate, w)
    assert full[0] == pytest.approx(window_index(400, period, rate, value, decay, w))
    assert full[1] == pytest.approx(2 * full[0])


def test_the_index_tends_to_the_continuous_one_as_the_epoch_shrinks():
    tau = np.array([0.5, 2.0, 4.0, 8.0])
    for w in (np.nan, 12.0):
        g = continuous_index(tau, 3.0, 1.0, math.log(2), w)
        fine = window_index(tau * 3600, 1 / 3600, 3.0, 1.0, math.log(2), w)
        assert fine == pytest.approx(g, rel=1e-3)


def test_shares_and_probabilities():
    assert window_share(0.0, 3.0, 0.1, 5) == 1.0
    share = window_share(np.array([0.5, 2.0, 20.0]), 3.0, 0.1, 5)
    assert np.all(np.diff(share) < 0) and share[-1] < 0.5
    assert listed_probability(4, 2.5) == pytest.approx(poisson_below(4, 2.5))
    assert listed_probability(np.nan, 1e6) == 1.0
    # only a window that can fill before the next epoch is looked at
    assert filling([1.0, 1.0, np.nan], 1.0, [1.0, 30.0, 30.0], [20.0, 20.0, 20.0]).tolist() \
        == [False, True, False]
