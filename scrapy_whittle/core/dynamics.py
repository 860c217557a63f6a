"""The ephemeral-content recursion x' = alpha x + u, written once.

Avrachenkov & Borkar, *Whittle Index Policy for Crawling Ephemeral Content* (IEEE TCNS 2018,
eq. (1)-(3)): entries arrive at rate Lambda with mean base value xi and lose interest at rate
mu; over epochs of length T the value waiting at a source left alone follows x' = alpha x + u
with

    alpha = exp(-mu T),   u = Lambda xi (1 - exp(-mu T)) / mu = Lambda xi T g(mu T),
    g(z) = (1 - e^{-z}) / z   (g(0) = 1: no decay, u = Lambda xi T).

Changing pages (Avrachenkov, Borkar & Patil, ICC 2021) share it through the bridge
alpha = exp(-lambda), u = m (1 - exp(-lambda)).

k epochs after a crawl (x = 0) the value waiting is u (1 - alpha^k) / (1 - alpha) = u G_k,
G_k the geometric sum, k when alpha = 1 and 1 for every k >= 1 when alpha = 0. Every module
that needs alpha, u or G_k calls these functions, so that the edge cases agree everywhere.
"""

from __future__ import annotations

import numpy as np


def decayed_integral(s, mu) -> np.ndarray:
    """int_0^s exp(-mu a) da = (1 - exp(-mu s)) / mu, = s at mu = 0."""
    s = np.asarray(s, dtype=np.float64)
    mu = np.asarray(mu, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = -np.expm1(-mu * s) / np.where(mu > 0, mu, 1.0)
    return np.where(mu > 0, v, s)


def alpha_u(rate_value, decay, period: float) -> tuple[np.ndarray, np.ndarray]:
    """(alpha, u) of sources whose entries bring ``rate_value`` = Lambda xi of value per unit
    of time and decay at rate ``decay`` = mu, over epochs of length ``period``."""
    return alpha_u_logs(rate_value, decay, period)[:2]


def alpha_u_logs(rate_value, decay, period: float
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(alpha, u, log alpha, 1 - alpha): :func:`alpha_u` with what :func:`geometric_sum`
    needs, from one ``exp`` and one ``expm1`` (log alpha = -mu T exactly, 1 - alpha =
    -expm1(-mu T); u = Lambda xi :func:`decayed_integral` (T, mu))."""
    u, log_alpha, one_minus = u_logs(rate_value, decay, period)
    return np.exp(log_alpha), u, log_alpha, one_minus


def u_logs(rate_value, decay, period: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(u, log alpha, 1 - alpha) of :func:`alpha_u_logs`, without alpha itself (for
    ``IndexTable.from_logs``). (In place where it can: at a million sources each temporary
    array is megabytes of fresh memory.)"""
    decay = np.asarray(decay, dtype=np.float64)
    log_alpha, one_minus = _logs(decay, period)
    rate_value = np.asarray(rate_value, dtype=np.float64)
    shape = np.broadcast_shapes(rate_value.shape, decay.shape)
    # the decayed integral over an epoch, (1 - alpha) / mu, = T at mu = 0
    u = np.full(shape, float(period))
    with np.errstate(divide="ignore", invalid="ignore"):
        np.divide(one_minus, decay, out=u, where=decay > 0)
    u *= rate_value
    return u, log_alpha, one_minus


def alpha_logs(decay, period: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(alpha, log alpha, 1 - alpha) of :func:`alpha_u_logs`, without u."""
    log_alpha, one_minus = decay_logs(decay, period)
    return np.exp(log_alpha), log_alpha, one_minus


def decay_logs(decay, period: float) -> tuple[np.ndarray, np.ndarray]:
    """(log alpha, 1 - alpha) of :func:`alpha_logs`, without alpha: all that
    :func:`geometric_sum` and ``IndexTable.from_logs`` need (one ``expm1``; alpha's ``exp``
    is a third of a selection's passes over a million sources)."""
    return _logs(np.asarray(decay, dtype=np.float64), period)


def _logs(decay: np.ndarray, period: float) -> tuple[np.ndarray, np.ndarray]:
    log_alpha = -decay * period                   # exactly, not the log of a rounded exp
    one_minus = np.expm1(log_alpha)
    return log_alpha, np.negative(one_minus, out=one_minus if one_minus.ndim else None)


def pages_alpha_u(change_rate, importance) -> tuple[np.ndarray, np.ndarray]:
    """(alpha, u) of changing pages: change rate lambda per epoch, importance m."""
    lam = np.asarray(change_rate, dtype=np.float64)
    return np.exp(-lam), np.asarray(importance, dtype=np.float64) * -np.expm1(-lam)


def geometric_sum(k, log_alpha, one_minus_alpha=None) -> np.ndarray:
    """G_k = (1 - alpha^k) / (1 - alpha) from log alpha (<= 0): k at alpha = 1, 1 for k >= 1
    at alpha = 0 (log alpha = -inf), 0 at k = 0; stable as alpha -> 1. ``one_minus_alpha``:
    -expm1(log alpha), when the caller has it already. (In place: see ``u_logs``.)"""
    k = np.asarray(k, dtype=np.float64)
    log_alpha = np.asarray(log_alpha, dtype=np.float64)
    g = np.empty(np.broadcast_shapes(k.shape, log_alpha.shape))
    with np.errstate(divide="ignore", invalid="ignore"):
        den = -np.expm1(log_alpha) if one_minus_alpha is None else \
            np.asarray(one_minus_alpha, dtype=np.float64)
        np.multiply(k, log_alpha, out=g)
        np.expm1(g, out=g)
        np.negative(g, out=g)
        pos = den > 0
        np.divide(g, den, out=g, where=pos)
    np.copyto(g, k, where=~pos)                    # alpha = 1: k
    np.copyto(g, 0.0, where=k == 0)
    return g


def expected_state(x0, alpha, u, k) -> np.ndarray:
    """The value waiting k epochs after a state x0: alpha^k x0 + u G_k."""
    alpha = np.asarray(alpha, dtype=np.float64)
    with np.errstate(divide="ignore"):
        la = np.log(alpha)
    k = np.asarray(k, dtype=np.float64)
    return np.power(alpha, k) * x0 + np.asarray(u, dtype=np.float64) * geometric_sum(k, la)


def refine(log_alpha, one_minus_alpha, u, resolution: float
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(log alpha, 1 - alpha, u) over epochs ``resolution`` times as long (a share of the
    epoch: a policy deciding several times an epoch): alpha^r, and the arrivals of the shorter
    epoch, u (1 - alpha^r) / (1 - alpha) = Lambda xi (1 - exp(-mu r T)) / mu (u r where
    alpha = 1). The value waiting after a time is the same at either resolution; the index,
    which prices waiting one epoch more, is not."""
    log_alpha = np.asarray(log_alpha, dtype=np.float64)
    one_minus = np.asarray(one_minus_alpha, dtype=np.float64)
    u = np.asarray(u, dtype=np.float64)
    if resolution == 1.0:
        return log_alpha, one_minus, u
    log_r = log_alpha * resolution
    one_minus_r = -np.expm1(log_r)
    with np.errstate(divide="ignore", invalid="ignore"):
        u_r = np.where(one_minus > 0, u * one_minus_r / np.where(one_minus > 0, one_minus, 1.0),
                       u * resolution)
    return log_r, one_minus_r, u_r
