"""The closed-form Whittle index for crawling ephemeral content.

Avrachenkov & Borkar, *Whittle Index Policy for Crawling Ephemeral Content* (IEEE TCNS 2018),
Theorem 1: for a source with alpha = exp(-mu T), u = Lambda xi (1 - alpha) / mu, crawl cost C
and u* = u / (1 - alpha),

    gamma(x) = [ eta(x) ((1 - alpha) x - u) + u (1 - alpha^eta(x)) / (1 - alpha) ] / C
    eta(x)   = ceil( log+_alpha( (u - (1 - alpha) x) / u ) ).

Writing s = 1 - x / u* this is gamma(x) = u [ (1 - alpha^eta) / (1 - alpha) - eta s ] / C with
eta = ceil(log s / log alpha). On the states a crawled source actually visits,
x_n = u* (1 - alpha^n), it is gamma(x_n) = (x_n - n u alpha^n) / C: exactly the subsidy at which
crawling every n epochs and every n + 1 epochs earn the same average reward. Between two such
states it is linear with slope n (1 - alpha) / C, and continuous, so it is non-decreasing.

Edge cases the paper leaves open, and what this module does (derived, not clamped):

* x >= u* (a source never crawled, or whose estimates just moved below its state): read
  literally the formula gives eta = 0 and gamma = 0, which would starve the fullest sources.
  From the definition, with subsidy lambda the relaxed single-source problem never crawls from
  u once C lambda >= u*, and at a state x >= u* crawling once earns x against the subsidy C
  lambda forgone, so the indifference point is gamma(x) = x / C. This is continuous at u*
  (the formula's limit from below is u*/C) and increasing.
* 0 <= x < u: eta = 1 and gamma(x) = (1 - alpha) x / C (eta is at least 1 for x > 0; at x = 0
  both readings give 0).
* u = 0 (a silent source): u* = 0, every state is >= u*, gamma(x) = x / C.
* alpha -> 1 (no decay): u* -> infinity and gamma -> 0 for every finite x: with nothing lost by
  waiting, any subsidy makes waiting preferable. (1 - alpha^eta) / (1 - alpha) is computed as
  expm1(eta log alpha) / expm1(log alpha), and log s as log1p(-x / u*), which stay accurate there.
* alpha -> 0 (content worthless after one epoch): log alpha -> -inf, eta = 1, gamma = (1-alpha)x/C.

Rounding in eta at a grid point is harmless: both neighbouring pieces take the same value there.
"""

from __future__ import annotations

import numpy as np

#: the smallest log alpha the index uses (alpha floored at 1e-300)
LOG_ALPHA_MIN = float(np.log(1e-300))
_LOG_ALPHA_MAX = float(np.log(1.0 - 2.0**-53))
_ONE_MINUS_MIN = float(-np.expm1(_LOG_ALPHA_MAX))


def whittle_index(x, alpha, u, cost=1.0) -> np.ndarray:
    """Whittle index gamma_i(x_i) of sources in state x (arrays broadcast; returns an array).

    x: expected value waiting at the source (>= 0); alpha in [0, 1]; u >= 0; cost > 0.
    """
    x, alpha, u, cost = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64)
                                              for a in (x, alpha, u, cost)))
    if x.ndim == 0:                                      # a 0-d array, still an array
        return IndexTable(alpha, u, cost).index(x[None]).reshape(())
    return IndexTable(alpha, u, cost).index(x)


class IndexTable:
    """Per-source constants of the index, precomputed once so that an epoch's evaluation over
    N sources costs a dozen in-place vectorised passes (``index``). Arrays of shape (N,).

    alpha is clamped into [1e-300, 1 - 2^-53] and a source with alpha = 1 gets u = 0 and
    1/u* = 0 (its index is then exactly 0, the limit); alpha = 0 gives eta = 1 as the limit
    does. This spares the hot path any special cases.
    """

    __slots__ = ("_consts", "_frozen", "_one_minus", "_precise", "_precise_mask", "_scratch",
                 "_shape")

    #: sources with 1 - alpha below this take the log1p/expm1 path; above it log/exp lose
    #: less than ~1e-13 relative, and are several times faster (SIMD) over large arrays.
    PRECISE_BELOW = 1e-3

    def __init__(self, alpha, u, cost=1.0) -> None:
        alpha, u, cost = np.broadcast_arrays(*(np.atleast_1d(np.asarray(a, dtype=np.float64))
                                               for a in (alpha, u, cost)))
        if np.any(~np.isfinite(alpha) | (alpha < 0) | (alpha > 1)):
            raise ValueError("alpha must lie in [0, 1]")
        if np.any(~np.isfinite(cost) | (cost <= 0)):
            raise ValueError("cost must be finite and > 0")
        frozen = alpha >= 1.0            # no decay: the index is exactly 0 (the limit)
        log_alpha = np.log(np.clip(alpha, 1e-300, 1.0 - 2.0**-53))   # in [-690.8, -1.1e-16]
        self._set_alpha(frozen, log_alpha, -np.expm1(log_alpha), cost)
        self._set_u(u)

    @classmethod
    def from_logs(cls, log_alpha, u, cost=1.0, one_minus_alpha=None) -> IndexTable:
        """The table of alpha = exp(``log_alpha``) (<= 0; -inf for alpha = 0), built from the
        logarithm the caller has (``dynamics.alpha_u_logs``) rather than from alpha:
        neither alpha nor its logarithm is computed again, and 1 - alpha is taken from
        ``one_minus_alpha`` when given. The clamps are those of alpha's: log alpha within
        [log 1e-300, log(1 - 2^-53)], and alpha = 1 where exp(log alpha) rounds to 1."""
        log_alpha, u, cost = np.broadcast_arrays(*(np.atleast_1d(np.asarray(a, dtype=np.float64))
                                                   for a in (log_alpha, u, cost)))
        if np.any(~(log_alpha <= 0.0)):
            raise ValueError("alpha must lie in [0, 1] (log alpha <= 0)")
        if np.any(~np.isfinite(cost) | (cost <= 0)):
            raise ValueError("cost must be finite and > 0")
        clipped = np.clip(log_alpha, LOG_ALPHA_MIN, _LOG_ALPHA_MAX)
        if one_minus_alpha is None:
            one_minus = -np.expm1(clipped)
        else:
            one_minus = np.maximum(np.broadcast_to(one_minus_alpha, u.shape), _ONE_MINUS_MIN)
        table = object.__new__(cls)
        table._set_alpha(log_alpha > -2.0**-54, clipped, one_minus, cost)
        table._set_u(u)
        return table

    def _set_alpha(self, frozen, log_alpha, one_minus, cost) -> None:
        """What the index needs of alpha (clamped) and the costs."""
        self._frozen = frozen
        self._one_minus = one_minus
        self._shape = one_minus.shape
        self._precise_mask = (one_minus < self.PRECISE_BELOW).ravel()
        self._precise = None if not self._precise_mask.any() else (
            slice(None) if self._precise_mask.all() else np.flatnonzero(self._precise_mask))
        # (1/u*, log alpha, 1/log alpha, 1/(alpha - 1), u, 1/C): all the formula needs; the
        # u part is set by _set_u
        self._consts = (None, log_alpha, 1.0 / log_alpha, -1.0 / one_minus, None, 1.0 / cost)

    def _set_u(self, u: np.ndarray) -> None:
        # (NaN and negatives fail the first test, +inf the second: two passes, not four)
        if not (np.all(u >= 0) and np.isfinite(u.max(initial=0.0))):
            raise ValueError("u must be finite and >= 0")
        # 1/u* = (1 - alpha)/u; +inf for a silent source, so every state is >= u*
        ustar_inv = np.divide(self._one_minus, u, out=np.full(u.shape, np.inf), where=u > 0)
        ustar_inv[self._frozen] = 0.0
        u = np.where(self._frozen, 0.0, u)
        _, *alpha_part, _, cost_inv = self._consts
        self._consts = (ustar_inv, *alpha_part, u, cost_inv)
        self._scratch: tuple[np.ndarray, np.ndarray] | None = None

    def with_u(self, u) -> IndexTable:
        """The table of the same alpha and costs for other arrivals ``u`` (same shape): only
        what depends on u is computed (a rhythm-aware policy's table of each phase)."""
        u = np.asarray(u, dtype=np.float64)
        if u.shape != self._shape:
            raise ValueError(f"u must have the table's shape {self._shape}, got {u.shape}")
        table = object.__new__(type(self))
        for name in ("_frozen", "_one_minus", "_shape", "_precise_mask", "_precise",
                     "_consts"):
            setattr(table, name, getattr(self, name))
        table._set_u(u)
        return table

    def index(self, x, out: np.ndarray | None = None) -> np.ndarray:
        """gamma_i(x_i) / C_i for every source; ``out`` (float64, the table's shape) is reused
        when given."""
        x = np.asarray(x, dtype=np.float64)
        if x.shape != self._shape:
            x = np.broadcast_to(x, np.broadcast_shapes(x.shape, self._shape))
        if x.shape != self._shape:                         # x adds leading dimensions
            return np.stack([self.index(xi) for xi in x.reshape(-1, *self._shape)]).reshape(
                x.shape)
        if out is None:
            out = np.empty(self._shape)
        if self._scratch is None:
            self._scratch = (np.empty(self._shape), np.empty(self._shape))
        return _evaluate(x, self._consts, self._precise, out, *self._scratch)

    def index_where_unsaturated(self, x) -> np.ndarray:
        """``index(x)`` (1-D table), the formula evaluated only where x < u*: at or above u*
        the index is x / C (the module docstring), which is what ``index`` returns there
        too, through its NaN. The same numbers; fewer passes when most sources wait at u*
        (the steady state of a long crawl of alike feeds)."""
        x = np.asarray(x, dtype=np.float64)
        ustar_inv, *_, cost_inv = self._consts
        with np.errstate(invalid="ignore"):            # (0 * inf: x = 0 at a silent source)
            below = np.flatnonzero(x * ustar_inv < 1.0)   # (NaN is not below: x / C = 0)
        if 2 * below.shape[0] > x.shape[0]:
            return self.index(x)
        out = x * cost_inv
        out[below] = self.index_at(below, x[below])
        return out

    def index_at(self, ids: np.ndarray, x: np.ndarray) -> np.ndarray:
        """gamma_i(x) / C_i for the sources ``ids`` only (1-D table), x aligned with ids."""
        x = np.asarray(x, dtype=np.float64)
        consts = tuple(c[ids] for c in self._consts)
        precise = None
        if self._precise is not None:
            sub = np.flatnonzero(self._precise_mask[ids])
            precise = sub if sub.size else None
        return _evaluate(x, consts, precise, np.empty(x.shape), np.empty(x.shape),
                         np.empty(x.shape))


def _evaluate(x, consts, precise, out, r, eta) -> np.ndarray:
    """Theorem 1 in a dozen in-place passes; ``out``, ``r``, ``eta`` are scratch of x's shape.

    Below u* the index never exceeds x (it is x_n - n u alpha^n <= x_n on the visited states
    and linear in between), and at or above u* it equals x, while the Theorem 1 expression
    turns NaN there (log of 1 - x/u* <= 0). So gamma = fmin(formula, x) / C, with NaN falling
    through to x: no masks.
    """
    ustar_inv, log_alpha, inv_log_alpha, em1_inv, u, cost_inv = consts
    geo = out
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        np.multiply(x, ustar_inv, out=r)                    # x / u* (NaN for 0 * inf)
        # eta = ceil(log(1 - r) / log alpha), at least 1; NaN (r > 1) or +inf (r = 1)
        # propagate to a NaN formula, which fmin below turns into x
        np.subtract(1.0, r, out=eta)
        np.log(eta, out=eta)
        eta *= inv_log_alpha
        np.ceil(eta, out=eta)
        np.maximum(eta, 1.0, out=eta)
        np.multiply(eta, log_alpha, out=geo)
        np.exp(geo, out=geo)                                # alpha^eta
        np.subtract(1.0, geo, out=geo)
        geo *= em1_inv
        np.negative(geo, out=geo)                           # (1 - alpha^eta) / (1 - alpha)
        if precise is not None:                             # alpha close to 1: stable forms
            rp = r.ravel()[precise]
            ep = np.ceil(np.log1p(-rp) * inv_log_alpha.ravel()[precise])
            np.maximum(ep, 1.0, out=ep)
            eta.ravel()[precise] = ep
            geo.ravel()[precise] = np.expm1(ep * log_alpha.ravel()[precise]) * \
                em1_inv.ravel()[precise]
        np.subtract(1.0, r, out=r)                          # s = 1 - x/u*
        r *= eta
        np.subtract(geo, r, out=geo)                        # geo - eta s >= 0 up to rounding
        np.maximum(geo, 0.0, out=geo)
        geo *= u
        np.fmin(geo, x, out=geo)
    geo *= cost_inv
    return geo


#: doublings of the search for a source's epochs to reach an index (2^60 epochs: never)
_REACH_DOUBLINGS = 60
#: halvings after it: a bracket a thousandth of its width (its lower end is what counts)
_REACH_HALVINGS = 10


def epochs_to_reach(log_alpha, one_minus_alpha, u, threshold: float,
                    start: np.ndarray | None = None) -> np.ndarray:
    """Epochs after a crawl (x = 0) before which a source's index (cost 1) stays below
    ``threshold``: a lower bound, never above the first epoch at which it reaches it
    (inf where it never does; 0 where it may at once).

    After a crawl the state is x_k = u* (1 - alpha^k), and on those states the index is
    f(k) = x_k - k u alpha^k (Theorem 1; between two of them it is linear in x, so it lies
    below f at the later one), which grows with k (f'(k) = alpha^k (-log alpha u* - u - k u
    log alpha) >= 0, as -log alpha >= 1 - alpha) towards u*: where u* <= threshold never.
    The index at a time t in (n - 1, n] epochs is at most f(n), so it cannot reach the
    threshold before the root k0 of f = threshold less one epoch; a bisection's lower end of
    the root stands for k0 (the caller lowers the threshold a little for the rounding of f).
    ``start``: epochs known to lie below the root (where x_k itself, which bounds the index,
    reaches the threshold): the search begins there."""
    log_alpha = np.asarray(log_alpha, dtype=np.float64)
    one_minus = np.asarray(one_minus_alpha, dtype=np.float64)
    u = np.asarray(u, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ustar = np.where(one_minus > 0, u / one_minus, np.inf)

        def f(k):
            decayed = np.exp(k * log_alpha)
            return -ustar * np.expm1(k * log_alpha) - k * u * decayed

        reaches = (u > 0) & (one_minus > 0) & (ustar > threshold)
        lo = np.zeros(u.shape) if start is None else np.where(
            np.isfinite(start) & (start > 0), start, 0.0)
        hi = 2.0 * lo + 1.0
        below = reaches & ~(f(hi) >= threshold)
        for _ in range(_REACH_DOUBLINGS):
            if not below.any():
                break
            lo = np.where(below, hi, lo)
            hi = np.where(below, 2.0 * hi, hi)
            below &= ~(f(hi) >= threshold)
        reaches &= ~below
        for _ in range(_REACH_HALVINGS):
            mid = 0.5 * (lo + hi)
            up = f(mid) >= threshold
            hi = np.where(up, mid, hi)
            lo = np.where(up, lo, mid)
    return np.where(reaches, np.maximum(lo - 1.0, 0.0), np.inf)
