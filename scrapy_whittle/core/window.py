"""A feed's window in the index: a feed lists only its newest W entries.

A source publishes at rate Lambda (Poisson), an entry is worth xi at publication and loses
interest at rate mu, and its feed lists its last W entries: an entry of age a is still listed
at a crawl if fewer than W entries came after it, which happens with probability
Q(W, Lambda a) = P(Poisson(Lambda a) < W). Crawled tau after the previous crawl, the value
captured is

    f(tau) = Lambda xi int_0^tau exp(-mu a) Q(W, Lambda a) da
           = Lambda xi / (mu + Lambda) sum_{j < W} r^j P(j + 1, (mu + Lambda) tau),

r = Lambda / (mu + Lambda) and P the regularised lower incomplete gamma function (the j-th term
is the entries that had exactly j successors when the crawl came). Without a window
(W -> infinity) f(tau) = (Lambda xi / mu) (1 - exp(-mu tau)) = u G_k at tau = k T, the
expected state of the 2018 paper, which :mod:`scrapy_whittle.core.dynamics` computes.

Over epochs of length T the index of a source k epochs after its crawl is the paper's index at
its state, which on the states a crawled source visits is (k + 1) f(kT) - k f((k + 1) T): the
subsidy at which crawling every k and every k + 1 epochs earn the same
(:mod:`scrapy_whittle.core.index`). With a window, f is that of the window, so the index of
a fast feed rises to f(kT), the whole of what it lists, as its window fills: waiting longer
only loses entries, and the feed is crawled before it overflows. With T -> 0 the index tends to
g(tau) = f(tau) - tau f'(tau), the continuous-time index (``../shared/notes`` of the project,
the renewal-reward form).

Only sources whose window can fill in the time considered need the sum: where
P(Poisson(Lambda tau) >= W) is negligible (``window_matters``) f is the windowless one.
"""

from __future__ import annotations

import math

import numpy as np

#: windows at or above this count as no window (a feed listing thousands of entries)
NO_WINDOW = 2048
#: log of the probability of a full window below which it cannot matter
_LOG_NEGLIGIBLE = math.log(1e-12)
#: mu tau past which a source's captured value is its limit (e^-37 < 1e-16)
SATURATED = 37.0


def window_matters(expected: np.ndarray, window: np.ndarray) -> np.ndarray:
    """bool: a source expecting ``expected`` = Lambda tau arrivals can fill its ``window``:
    the Chernoff bound of P(Poisson(Lambda tau) >= W), exp(-y) (e y / W)^W, is not negligible
    (NaN or >= NO_WINDOW: no window, never)."""
    w = np.asarray(window, dtype=np.float64)
    y = np.asarray(expected, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        finite = np.isfinite(w) & (w < NO_WINDOW)
        bound = -y + w * (1.0 + np.log(y / w))
        return finite & ((y >= w) | (bound >= _LOG_NEGLIGIBLE))


def captured_in_window(tau, rate, value, decay, window) -> np.ndarray:
    """f(tau): the expected value a crawl captures ``tau`` after the previous one, of a source
    publishing at ``rate`` entries worth ``value`` decaying at ``decay`` whose feed lists
    ``window`` entries (NaN or >= NO_WINDOW: no window). Arrays broadcast."""
    tau, rate, value, decay, window = np.broadcast_arrays(
        *(np.asarray(a, dtype=np.float64) for a in (tau, rate, value, decay, window)))
    shape = tau.shape
    tau, rate, value, decay, window = (a.ravel() for a in (tau, rate, value, decay, window))
    tau = np.maximum(tau, 0.0)
    out = rate * value * _decayed(tau, decay)
    at = np.flatnonzero(window_matters(rate * tau, window) & (rate > 0))
    if at.size:
        out[at] = _windowed(tau[at], rate[at], value[at], decay[at], window[at])
    return out.reshape(shape)


def window_share(tau, rate, decay, window) -> np.ndarray:
    """f(tau) over its windowless value: the share of what arrived since a crawl ``tau`` ago
    (weighted by value at capture) that its feed still lists (1 at tau = 0 and without a
    window)."""
    tau = np.maximum(np.asarray(tau, dtype=np.float64), 0.0)
    full = _decayed(tau, np.asarray(decay, dtype=np.float64))
    kept = captured_in_window(tau, rate, 1.0, decay, window) / np.where(
        np.asarray(rate) > 0, rate, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(full > 0, kept / full, 1.0)
    return np.clip(share, 0.0, 1.0)


def _decayed(tau: np.ndarray, decay: np.ndarray) -> np.ndarray:
    """int_0^tau exp(-mu a) da, = tau at mu = 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        v = -np.expm1(-decay * tau) / np.where(decay > 0, decay, 1.0)
    return np.where(decay > 0, v, tau)


def _windowed(tau, rate, value, decay, window) -> np.ndarray:
    """f(tau) by the sum over the W listed positions, for sources whose window matters."""
    total = rate + decay
    y = total * tau
    w_max = int(np.max(window))
    j = np.arange(w_max, dtype=np.float64)
    # Poisson(y) probabilities of 0 .. W - 1 in log space (y may be hundreds), their running
    # sums the upper tails Q(j + 1, y); P(j + 1, y) = 1 - Q(j + 1, y)
    log_fact = np.concatenate(([0.0], np.cumsum(np.log(np.arange(1, w_max)))))
    with np.errstate(divide="ignore", invalid="ignore"):
        log_y = np.log(y)[:, None]
        pmf = np.exp(j * log_y - y[:, None] - log_fact)
    pmf[y == 0.0] = 0.0
    pmf[y == 0.0, 0] = 1.0
    lower = np.maximum(1.0 - np.cumsum(pmf, axis=1), 0.0)
    r = rate / total
    with np.errstate(divide="ignore"):
        log_r = np.log(r)[:, None]
    weight = np.exp(j * log_r)
    weight[j[None, :].repeat(tau.shape[0], 0) >= window[:, None]] = 0.0
    return rate * value / total * np.sum(weight * lower, axis=1)


def window_index(steps, period: float, rate, value, decay, window) -> np.ndarray:
    """The index (per crawl, before dividing by its cost) of sources ``steps`` epochs of length
    ``period`` after their last crawl: (k + 1) f(kT) - k f((k + 1) T), f that of
    :func:`captured_in_window`. Equal to the 2018 paper's index on the states it visits when
    there is no window."""
    k = np.asarray(steps, dtype=np.float64)
    f_k = captured_in_window(k * period, rate, value, decay, window)
    f_next = captured_in_window((k + 1.0) * period, rate, value, decay, window)
    return np.maximum((k + 1.0) * f_k - k * f_next, 0.0)


def filling(steps, period: float, rate, window) -> np.ndarray:
    """bool: sources ``steps`` epochs after their crawl whose ``window`` (NaN: unknown) can
    fill before the next epoch ends: where :func:`index_at_state` differs from the paper's."""
    k = np.asarray(steps, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return np.isfinite(k) & window_matters(np.asarray(rate) * (k + 1.0) * period, window)


def index_at_state(steps, x, u, decay, period: float, rate, window) -> np.ndarray:
    """The index (per crawl) of sources ``steps`` = k epochs after their crawl, at the paper's
    state ``x`` = x_k (windowless) with arrivals ``u`` per epoch: (k + 1) x_k s_k - k x_{k+1}
    s_{k+1}, x_{k+1} = alpha x_k + u, s_j the :func:`window_share` at jT. Without a window
    the paper's index on the states a crawled source visits (:func:`window_index`). At k =
    inf (a state at or above u / (1 - alpha), which no crawled source reaches: see
    :func:`steps_to_state`) x s_inf, the paper's x times the share a full window keeps."""
    k, x, u, decay, rate, window = np.broadcast_arrays(
        *(np.asarray(a, dtype=np.float64) for a in (steps, x, u, decay, rate, window)))
    saturated = np.isinf(k)
    k = np.where(saturated, 0.0, k)
    x_next = x * np.exp(-decay * period) + u
    index = ((k + 1.0) * x * window_share(k * period, rate, decay, window)
             - k * x_next * window_share((k + 1.0) * period, rate, decay, window))
    if saturated.any():                 # (e^-mu tau < 1e-16: the share of a full window)
        at = saturated
        with np.errstate(divide="ignore"):
            lasting = np.where(decay[at] > 0, SATURATED / decay[at], np.inf)
        index[at] = x[at] * window_share(lasting, rate[at], decay[at], window[at])
    return np.maximum(index, 0.0)


def steps_to_state(x, u, decay, period: float) -> np.ndarray:
    """The epochs k (fractional) after a crawl at which a source of arrivals ``u`` per epoch
    of length ``period``, decaying at ``decay``, holds ``x``: u G_k = x, k = log(1 - x / u*)
    / log alpha with u* = u / (1 - alpha); inf at or above u*. A state that the time since
    the crawl does not give (a daily rhythm's) is ranked at that age, where the index of the
    window (:func:`index_at_state`) is that of the source whose arrivals are ``u``."""
    x = np.asarray(x, dtype=np.float64)
    u = np.asarray(u, dtype=np.float64)
    decay = np.asarray(decay, dtype=np.float64)
    log_alpha = -decay * period
    with np.errstate(divide="ignore", invalid="ignore"):
        ustar = np.where(log_alpha < 0, u / -np.expm1(log_alpha), np.inf)
        k = np.where(log_alpha < 0, np.log1p(-x / ustar) / log_alpha, x / u)
    return np.where((x >= ustar) | np.isnan(k), np.inf, np.maximum(k, 0.0))


def continuous_index(tau, rate, value, decay, window) -> np.ndarray:
    """g(tau) = f(tau) - tau f'(tau), the limit of :func:`window_index` as the epoch shrinks
    (f'(tau) = Lambda xi exp(-mu tau) Q(W, Lambda tau))."""
    tau = np.maximum(np.asarray(tau, dtype=np.float64), 0.0)
    f = captured_in_window(tau, rate, value, decay, window)
    rate, value, decay, window = (np.asarray(a, dtype=np.float64)
                                  for a in (rate, value, decay, window))
    slope = rate * value * np.exp(-decay * tau) * listed_probability(window, rate * tau)
    return np.maximum(f - tau * slope, 0.0)


def listed_probability(window, expected) -> np.ndarray:
    """Q(W, Lambda a) = P(Poisson(Lambda a) < W): an entry with ``expected`` successors on
    average is still listed (1 where there is no window)."""
    window, expected = np.broadcast_arrays(np.asarray(window, dtype=np.float64),
                                           np.asarray(expected, dtype=np.float64))
    out = np.ones(window.shape)
    flat_w, flat_e, flat_o = window.ravel(), expected.ravel(), out.ravel()
    for i in np.flatnonzero(window_matters(flat_e, flat_w)):
        w, y = int(flat_w[i]), float(flat_e[i])
        terms = [math.exp(m * math.log(y) - y - math.lgamma(m + 1)) if y > 0 else float(m == 0)
                 for m in range(w)]
        flat_o[i] = min(1.0, sum(terms))
    return out
