"""LSPE(0) critic + policy gradient on parametrised Whittle thresholds.

Avrachenkov & Borkar, *A learning algorithm for the Whittle index policy for scheduling web
crawlers* (Allerton 2019), Sections III-V. Under the Whittle policy source i is crawled when
its state exceeds a threshold T_i(x_{-i}) that depends on the other sources' states; the paper
parametrises T_i(x_{-i}) = q_0^i + q_1^i S_i + q_2^i S_i^2 with S_i = sum_{k != i} x_k (it
prints q_1^i twice; we read the last coefficient as q_2^i), relaxes the step "crawl iff
x_i >= T_i" into f_i = logistic(kappa_i (x_i - T_i - 0.5)), and learns q by a likelihood-ratio
gradient, eq. (7)-(9):

    q(n+1) = q(n) + a(n) grad_q log p(X(n+1) | X(n)) * (r(n) . phi(X(n+1))),
    grad_{q^i} log p = kappa_i (f_i - nu_i) psi(x_{-i}),  psi = (1, S_i, S_i^2),

(eq. (8) simplified: d log f / dT = -kappa (1 - f) when crawled, d log(1 - f) / dT = kappa f
when not) with the critic V(x) ~ r . phi(x), phi = (x_1..x_N, x_i x_j for i <= j), learned by
LSPE(0) for the average reward: r <- r + gamma Bbar^+ (Abar r + bbar) with
Bbar = avg phi phi^T (started at eps I), Abar = avg phi (phi' - phi)^T,
bbar = avg phi (g - eta), eta = avg g, and Bbar^+ the Tikhonov-regularised inverse
(Bbar^T Bbar + delta I)^{-1} Bbar^T (Section V). Step sizes: the averages use
b(n) = c / ceil(n / 1000)^{2/3}, the thresholds a(n) = c / ceil(n / 500) (two timescales,
a = o(b)). kappa = 2, gamma = 0.05 as in the paper.

How we read the parts the paper leaves open (documented in docs/experiments.md):

* The per-stage reward g: the objective is the captured value sum_i X_i nu_i; eq. (6) and the
  eta / bbar iterates print sum_i X_i (all sources), which would reward never crawling. We
  use the value actually captured by the epoch's crawls (``obs.total_reward``), an unbiased
  sample of sum_i X_i nu_i.
* The state X(n) and (u_i, alpha_i): the paper runs the mean dynamics (2)-(3), which need
  alpha_i and u_i, and says the algorithm "hardly uses any information about the system
  parameters"; it does not say where they come from. We estimate them online
  (``thompson.EphemeralEstimator``: arrivals counted per exposure, item base values, decay
  fitted from captured versus base values) and set x_i = u_i (1 - alpha_i^k) / (1 - alpha_i),
  k = epochs since source i was last crawled. The same estimates give the projection
  interval [u_i, u_i / (1 - alpha_i)].
* The projection: the threshold's value is clipped to [u_i, u_i / (1 - alpha_i)] wherever f_i
  is evaluated, and after each update q_0^i is shifted so that T_i at the new state lies in
  the interval (the parameters themselves stay bounded).
* The operative policy: the paper says it "deterministically picks at each time the N_0 sites",
  so by default (``act="rank"``) the budget's worth of sources of largest margin
  x_i - T_i(x_{-i}) is crawled; ``act="sample"`` draws nu_i ~ Bernoulli(f_i) independently, as
  the paper's simulation apparently did ("on average one arm sampled"), and drops draws over
  the budget by margin.
* Scale: S_i enters psi as S_i / x_scale and the critic features use x / x_scale, so the
  quadratic terms stay of order one (the paper uses raw values); f_i uses raw x and T_i.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from scrapy_whittle.core.dynamics import expected_state
from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.policies.base import Policy
from scrapy_whittle.core.policies.thompson import EphemeralEstimator
from scrapy_whittle.core.problem import Problem
from scrapy_whittle.core.selection import select_top


@dataclass
class LSPEConfig:
    kappa: float = 2.0
    """slope kappa_i of the logistic relaxation (the paper: 2)"""
    gamma: float = 0.05
    """LSPE(0) step gamma (the paper: 0.05)"""
    c: float = 0.5
    """constant c in a(n) = c / ceil(n/500), b(n) = c / ceil(n/1000)^(2/3) (paper: c in (0,1))"""
    eps: float = 1.0
    """Bbar(-1) = eps I"""
    delta: float = 1e-3
    """Tikhonov regularisation delta of (Bbar^T Bbar + delta I)^{-1} Bbar^T"""
    x_scale: float = 100.0
    """states enter the critic features and the threshold features divided by this"""
    act: str = "rank"
    """'rank': crawl the top margins x_i - T_i; 'sample': nu_i ~ Bernoulli(f_i), capped"""


def regularised_inverse(b: np.ndarray, delta: float) -> np.ndarray:
    """Tikhonov-regularised inverse (B^T B + delta I)^{-1} B^T (Allerton 2019, Section V)."""
    n = b.shape[0]
    return np.linalg.solve(b.T @ b + delta * np.eye(n), b.T)


def project_thresholds(t: np.ndarray, u: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Clip thresholds to [u_i, u_i / (1 - alpha_i)] (u_i* = inf when alpha_i = 1)."""
    with np.errstate(divide="ignore"):
        ustar = np.where(alpha < 1, u / np.where(alpha < 1, 1 - alpha, 1.0), np.inf)
    return np.minimum(np.maximum(t, u), ustar)


def critic_features(x: np.ndarray) -> np.ndarray:
    """phi(x) = (x_1..x_N, x_i x_j for i <= j)."""
    iu = np.triu_indices(x.shape[0])
    return np.concatenate([x, np.outer(x, x)[iu]])


def logistic(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))   # overflow-free


class LSPEPolicy(Policy):
    """Allerton 2019 learner: LSPE(0) critic, policy gradient on Whittle thresholds."""

    name = "lspe"
    per_source = {"last_crawl": 0}
    scalar_state = ("n_step", "eta", "_epoch")

    def __init__(self, problem: Problem, rng=None, config: LSPEConfig | None = None,
                 estimator_options: dict[str, Any] | None = None, **overrides: Any) -> None:
        super().__init__(problem, rng)
        cfg = config if config is not None else LSPEConfig()
        if overrides:
            cfg = LSPEConfig(**{**asdict(cfg), **overrides})
        if cfg.act not in ("rank", "sample"):
            raise ValueError(f"act ({cfg.act!r}) must be 'rank' or 'sample'")
        self.config = cfg
        self.estimator = EphemeralEstimator(problem.n, problem.period,
                                            **(estimator_options or {}))
        self._init_learner(problem.n)
        self.n_step = 0
        self.eta = 0.0
        self._epoch = 0
        self._pending: dict[str, np.ndarray] | None = None

    def _init_learner(self, n: int) -> None:
        m = n + n * (n + 1) // 2
        self.r = np.zeros(m)
        self.B = self.config.eps * np.eye(m)
        self.A = np.zeros((m, m))
        self.bvec = np.zeros(m)
        self.q = np.zeros((n, 3))

    # -- model state from estimates -------------------------------------------------------
    def model(self) -> tuple[np.ndarray, np.ndarray]:
        lam, xi, mu = self.estimator.point()
        return self.estimator.alpha_u(lam, xi, mu)

    def state(self, epoch: int, alpha, u) -> np.ndarray:
        return expected_state(0.0, alpha, u, epoch - self.last_crawl)

    def psi(self, x: np.ndarray) -> np.ndarray:
        """(N, 3): psi(x_{-i}) = (1, S_i, S_i^2), S_i = sum_{k != i} x_k / x_scale."""
        s = (x.sum() - x) / self.config.x_scale
        return np.stack([np.ones_like(s), s, s * s], axis=1)

    def thresholds(self, x: np.ndarray, alpha, u) -> np.ndarray:
        return project_thresholds(np.einsum("ij,ij->i", self.q, self.psi(x)), u, alpha)

    def activation(self, x, alpha, u) -> tuple[np.ndarray, np.ndarray]:
        """(f_i, margin_i): relaxed probability of crawling and x_i - T_i."""
        margin = x - self.thresholds(x, alpha, u)
        return logistic(self.config.kappa * (margin - 0.5)), margin

    # -- acting ---------------------------------------------------------------------------
    def select(self, epoch: int, budget: float, eligible=None) -> np.ndarray:
        self._epoch = epoch
        alpha, u = self.model()
        x = self.state(epoch, alpha, u)
        f, margin = self.activation(x, alpha, u)
        if self.config.act == "sample":
            drawn = self.rng.random(self.n) < f
            eligible = drawn if eligible is None else drawn & eligible
        chosen = select_top(margin, self.problem.cost, budget, eligible=eligible)
        self._pending = {"x": x, "f": f}
        return chosen

    # -- learning -------------------------------------------------------------------------
    def steps(self, n: int) -> tuple[float, float]:
        """(a(n), b(n)) of the paper, n >= 1."""
        c = self.config.c
        return c / np.ceil(n / 500), c / np.ceil(n / 1000) ** (2.0 / 3.0)

    def observe(self, obs: Observation) -> None:
        self.estimator.update(obs)
        crawled = obs.sources[obs.ok]
        self.last_crawl[crawled] = obs.epoch
        pend, self._pending = self._pending, None
        if pend is None:                       # crawls we did not choose: data only
            return
        cfg = self.config
        self.n_step += 1
        a_n, b_n = self.steps(self.n_step)
        alpha, u = self.model()
        x, f = pend["x"], pend["f"]
        x2 = self.state(obs.epoch + 1, alpha, u)
        phi = critic_features(x / cfg.x_scale)
        phi2 = critic_features(x2 / cfg.x_scale)
        g = obs.total_reward
        # critic: averages on the faster timescale b(n), then the LSPE(0) step
        self.eta += b_n * (g - self.eta)
        self.B += b_n * (np.outer(phi, phi) - self.B)
        self.A += b_n * (np.outer(phi, phi2 - phi) - self.A)
        self.bvec += b_n * (phi * (g - self.eta) - self.bvec)
        self.r = self.r + cfg.gamma * regularised_inverse(self.B, cfg.delta) @ (
            self.A @ self.r + self.bvec)
        # actor: likelihood-ratio gradient on the slower timescale a(n)
        nu = np.zeros(self.n)
        nu[crawled] = 1.0
        v_next = float(self.r @ phi2)
        grad = cfg.kappa * (f - nu)[:, None] * self.psi(x)
        self.q += a_n * grad * v_next
        # projection: keep T_i at the new state inside [u_i, u_i / (1 - alpha_i)]
        psi2 = self.psi(x2)
        t_raw = np.einsum("ij,ij->i", self.q, psi2)
        self.q[:, 0] += project_thresholds(t_raw, u, alpha) - t_raw

    # -- growth and persistence -----------------------------------------------------------
    def grow(self, n_new: int, cost=1.0, alpha=None, u=None) -> None:
        """New sources restart the critic (its feature space changes); thresholds of the old
        sources are kept."""
        if n_new <= 0:
            return
        super().grow(n_new, cost, alpha, u)
        self.last_crawl[-n_new:] = self._epoch
        self.estimator.grow(n_new)
        q = self.q
        self._init_learner(self.n)
        self.q[: q.shape[0]] = q
        self._pending = None

    _arrays = ("r", "B", "A", "bvec", "q")

    def _row_children(self):
        return {"estimator": self.estimator}

    def rate_estimator(self):
        return self.estimator.rates

    def global_state(self) -> dict[str, Any]:
        state = super().global_state()
        state.update({k: getattr(self, k).copy() for k in self._arrays})
        state["config"] = asdict(self.config)
        state["pending"] = (None if self._pending is None
                            else {k: v.copy() for k, v in self._pending.items()})
        return state

    def load_global_state(self, state: dict[str, Any]) -> None:
        super().load_global_state(state)
        for k in self._arrays:
            setattr(self, k, np.array(state[k], dtype=np.float64))
        pend = state.get("pending")
        self._pending = None if pend is None else {k: np.array(v) for k, v in pend.items()}
