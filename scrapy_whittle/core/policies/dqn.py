"""Full-gradient DQN (FG-DQN) over arms = groups of pages.

*Deep Reinforcement Learning for Web Crawling* (Avrachenkov, Borkar & Patil, ICC 2021),
Algorithm 1 and the Appendix, eq. (9):

    theta_{n+1} = theta_n - a(n) ( overline{r + gamma max_v Q(Z', v; theta) - Q(Z, U; theta)}
                                   x (gamma grad Q(Z', v_n; theta) - grad Q(Z, U; theta))
                                   + xi_{n+1} ),

i.e. a stochastic gradient of the Bellman error in which the gradient flows through BOTH
Q(Z, U) and the max over Q(Z', .) (no target network, no ``detach``), plus extraneous noise
xi uniform on [-1, 1] componentwise. How we read it:

* the overline is the paper's special experience replay (averaging over past samples with the
  same (Z, U)); Algorithm 1 drops it ("without considering an experience replay") and uses a
  random minibatch of B transitions instead, so the loss is
  mean_b (r_b + gamma max_v Q(s'_b, v) - Q(s_b, a_b))^2, whose gradient is eq. (9)'s bracket
  averaged over the minibatch (the factor 2 goes into the step size);
* xi is added to the gradient of every parameter, scaled by ``DQNConfig.grad_noise`` and
  multiplied by the same step: with ``optimizer="sgd"`` this is literally eq. (9); with Adam
  the noisy gradient goes through Adam's normalisation. Default amplitude: see DQNConfig.

State (Section II): per arm k, X_k = slots since the arm was last chosen (reset to 0 when
chosen, eq. (4)) and Y_k = whether the page crawled at the arm's last visit had changed
(eq. (5)); input = concat(norm(X), Y) with norm(X) = log1p(X) / log1p(x_scale), which keeps a
never-crawled arm's input growing slowly instead of exploding. Output: one Q-value per arm.
epsilon-greedy with epsilon linear from 0.7 to 0.1 over ``eps_decay_steps`` slots. When an arm
is chosen its next page is crawled round-robin (``groups.RoundRobinArms``). A budget of M > 1
crawls the top-M arms by Q (each exploring pick is replaced by a random arm with probability
epsilon); every chosen arm gives one transition (s, k, r_k, s') in replay.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass
from itertools import pairwise
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.utils import skip_init

from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.policies.base import Policy
from scrapy_whittle.core.policies.groups import RoundRobinArms, arm_of_sources
from scrapy_whittle.core.problem import Problem


@dataclass
class DQNConfig:
    hidden: tuple[int, ...] = (4000, 8)
    """widths of the hidden layers (the paper: 4000 and 8, ReLU after each)"""
    gamma: float = 0.95
    """discount factor of the MDP (the paper: 0.95)"""
    eps_start: float = 0.7
    """initial exploration probability (the paper: 0.7)"""
    eps_end: float = 0.1
    """final exploration probability (the paper: 0.1)"""
    eps_decay_steps: int = 3000
    """slots over which epsilon decreases linearly (the paper: "slowly"; not given)"""
    buffer_size: int = 10_000
    """replay memory size M (not given in the paper)"""
    batch_size: int = 64
    """minibatch size B (not given in the paper)"""
    learning_starts: int = 64
    """transitions stored before the first update"""
    train_every: int = 1
    """slots between two gradient steps"""
    optimizer: str = "adam"
    """'adam' or 'sgd' (sgd makes eq. (9) literal; the paper does not name its optimiser)"""
    lr: float = 1e-3
    """step size a(n), constant (not given in the paper; 1e-3 learned faster than 1e-4 in a
    3,000-slot check on icc2021-single)"""
    grad_noise: float = 0.01
    """amplitude of the extraneous noise xi added to every gradient component (uniform on
    [-grad_noise, grad_noise]); eq. (9) has amplitude 1 for the step a(n) of a convergence
    proof, which with parameters of order 1e-2 drowns the gradient; 0 disables it"""
    x_scale: float = 100.0
    """X is fed as log1p(X) / log1p(x_scale)"""
    max_arms: int = 256
    """without groups, sources are clustered into at most this many arms"""
    device: str = "auto"
    """'auto' (cuda when available, else cpu), 'cpu' or 'cuda'"""


def _linear(w_in: int, w_out: int, device: torch.device | str = "cpu") -> nn.Linear:
    """A linear layer left uninitialised (``skip_init``: no draw from torch's global RNG).
    A crawl may start with no source (a list fetched after start-up), and its first and last
    layers then have no weight: torch warns that initialising those does nothing, which is
    all it should do."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Initializing zero-element tensors is a no-op")
        return skip_init(nn.Linear, w_in, w_out, device=device)


class QNetwork(nn.Module):
    """MLP: 2K inputs (X, Y of every arm) -> hidden layers with ReLU -> K Q-values."""

    def __init__(self, n_arms: int, hidden: tuple[int, ...], generator: torch.Generator):
        super().__init__()
        widths = [2 * n_arms, *hidden, n_arms]
        layers: list[nn.Module] = []
        for i, (w_in, w_out) in enumerate(pairwise(widths)):
            # skip_init: no draw from torch's global RNG; initialised below from ours
            layers.append(_linear(w_in, w_out))
            if i < len(widths) - 2:
                layers.append(nn.ReLU())
        self.net = nn.Sequential(*layers)
        with torch.no_grad():   # PyTorch's default init, drawn from our own generator
            for layer in self.net:
                if isinstance(layer, nn.Linear):
                    # a layer without inputs (no source yet) has only its biases to draw
                    bound = 1.0 / np.sqrt(max(layer.in_features, 1))
                    nn.init.uniform_(layer.weight, -bound, bound, generator=generator)
                    nn.init.uniform_(layer.bias, -bound, bound, generator=generator)

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        return self.net(s)


def fg_bellman_loss(q: QNetwork, s, a, r, s2, gamma: float) -> torch.Tensor:
    """Full-gradient Bellman error: mean (r + gamma max_v Q(s', v) - Q(s, a))^2, with the
    gradient flowing through both Q terms (no target network, no detach)."""
    q_sa = q(s).gather(1, a[:, None])[:, 0]
    q_next = q(s2).max(dim=1).values
    delta = r + gamma * q_next - q_sa
    return (delta * delta).mean()


def _resolve_device(device: str) -> torch.device:
    """``DQNConfig.device`` as a torch device; a ValueError that says why for one this torch
    cannot use (torch's own answer to "cuda" without a GPU is a bare AssertionError)."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        resolved = None
    if resolved is None or resolved.type not in ("cpu", "cuda"):
        raise ValueError(f"device ({device!r}) must be 'auto', 'cpu' or 'cuda[:index]'")
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device ({device!r}): torch {torch.__version__} sees no CUDA GPU "
                         f"(use 'auto' or 'cpu')")
    return resolved


class DQNPolicy(Policy):
    """FG-DQN crawl policy over arms (groups of sources, round-robin inside)."""

    name = "dqn"

    def __init__(self, problem: Problem, rng=None, config: DQNConfig | None = None,
                 source_rates: np.ndarray | None = None, **overrides: Any) -> None:
        """``source_rates``: estimated change rates (e.g. from an earlier crawl's estimators)
        used to cluster sources into arms when there are no groups and more than
        ``max_arms`` sources; without them sources are grouped in blocks of ids."""
        super().__init__(problem, rng)
        cfg = config if config is not None else DQNConfig()
        if overrides:
            cfg = DQNConfig(**{**asdict(cfg), **overrides})
        if cfg.optimizer not in ("adam", "sgd"):
            raise ValueError(f"optimizer ({cfg.optimizer!r}) must be 'adam' or 'sgd'")
        self.config = cfg
        self.device = _resolve_device(cfg.device)
        self.arms = RoundRobinArms(arm_of_sources(problem, cfg.max_arms, source_rates))
        k = self.arms.k
        seed = int(self.rng.integers(2**62))
        self.gen = torch.Generator().manual_seed(seed)          # init and noise, on CPU
        self.q = QNetwork(k, tuple(cfg.hidden), self.gen).to(self.device)
        self.noise_gen = self._noise_generator()
        self.opt = self._make_optimizer()
        # arm state (eq. (4)-(5))
        self.x = np.zeros(k)
        self.y = np.zeros(k)
        # replay memory (ring buffer)
        cap = cfg.buffer_size
        self.buf_s = np.zeros((cap, 2 * k), dtype=np.float32)
        self.buf_s2 = np.zeros((cap, 2 * k), dtype=np.float32)
        self.buf_a = np.zeros(cap, dtype=np.int64)
        self.buf_r = np.zeros(cap, dtype=np.float32)
        self.buf_pos = 0
        self.buf_len = 0
        self.steps = 0          # slots observed
        self.updates = 0        # gradient steps taken
        self.last_loss = float("nan")

    def _noise_generator(self) -> torch.Generator:
        """The generator of the gradient noise: on the CPU the policy's own; on a GPU one on
        the GPU, seeded from it. (Drawn on the CPU and copied over, the noise would take most of
        a training step's time on a GPU.)"""
        if self.device.type == "cpu":
            return self.gen
        seed = int(torch.randint(0, 2**62, (1,), generator=self.gen))
        return torch.Generator(device=self.device).manual_seed(seed)

    def _make_optimizer(self) -> torch.optim.Optimizer:
        if self.config.optimizer == "sgd":
            return torch.optim.SGD(self.q.parameters(), lr=self.config.lr)
        return torch.optim.Adam(self.q.parameters(), lr=self.config.lr)

    # -- state and exploration ------------------------------------------------------------
    def features(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        xn = np.log1p(x) / np.log1p(self.config.x_scale)
        return np.concatenate([xn, y], axis=-1).astype(np.float32)

    @property
    def epsilon(self) -> float:
        c = self.config
        frac = min(1.0, self.steps / max(1, c.eps_decay_steps))
        return c.eps_start + frac * (c.eps_end - c.eps_start)

    def q_values(self) -> np.ndarray:
        with torch.no_grad():
            s = torch.as_tensor(self.features(self.x, self.y), device=self.device)
            return self.q(s[None])[0].cpu().numpy().astype(np.float64)

    def select(self, epoch: int, budget: float, eligible=None) -> np.ndarray:
        k = self.arms.k
        if k == 0:
            return np.zeros(0, dtype=np.int64)
        prio = self.q_values()
        eps = self.epsilon
        if budget < 2:      # Algorithm 1: with probability epsilon one arm at random
            if self.rng.random() < eps:
                prio = self.rng.random(k)
        else:               # each arm is promoted to a random top rank w.p. epsilon
            explore = self.rng.random(k) < eps
            prio = np.where(explore, np.max(prio) + 1.0 + self.rng.random(k), prio)
        return self.arms.select(prio, self.problem.cost, budget, eligible)

    # -- learning -------------------------------------------------------------------------
    def observe(self, obs: Observation) -> None:
        ok = obs.ok
        src = obs.sources[ok]
        arms = self.arms.arm[src]
        s = self.features(self.x, self.y)
        r_arm = np.zeros(self.arms.k)
        np.add.at(r_arm, arms, obs.reward[ok])
        y_arm = self.y.copy()
        y_arm[arms] = obs.changed[ok]
        self.x += 1.0                               # eq. (4): +1 when passive ...
        self.x[arms] = 0.0                          # ... reset to 0 when chosen
        self.y = y_arm                              # eq. (5)
        s2 = self.features(self.x, self.y)
        for k in np.unique(arms):
            self._store(s, int(k), float(r_arm[k]), s2)
        self.steps += 1
        c = self.config
        if self.buf_len >= max(c.learning_starts, 1) and self.steps % c.train_every == 0:
            idx = self.rng.integers(0, self.buf_len, size=min(c.batch_size, self.buf_len))
            self.last_loss = self.train_step(idx)

    def _store(self, s, a: int, r: float, s2) -> None:
        p = self.buf_pos
        self.buf_s[p], self.buf_a[p], self.buf_r[p], self.buf_s2[p] = s, a, r, s2
        self.buf_pos = (p + 1) % self.buf_s.shape[0]
        self.buf_len = min(self.buf_len + 1, self.buf_s.shape[0])

    def train_step(self, idx: np.ndarray) -> float:
        """One FG-DQN step (eq. (9)) on the replay transitions ``idx``; returns the loss."""
        dev = self.device
        s = torch.as_tensor(self.buf_s[idx], device=dev)
        a = torch.as_tensor(self.buf_a[idx], device=dev)
        r = torch.as_tensor(self.buf_r[idx], device=dev)
        s2 = torch.as_tensor(self.buf_s2[idx], device=dev)
        loss = fg_bellman_loss(self.q, s, a, r, s2, self.config.gamma)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.config.grad_noise > 0:
            g = self.noise_gen
            for p in self.q.parameters():
                xi = torch.rand(p.shape, generator=g, device=g.device) * 2.0 - 1.0
                p.grad.add_(xi.to(dev), alpha=self.config.grad_noise)
        self.opt.step()
        self.updates += 1
        return float(loss.detach())

    # -- growth and persistence -----------------------------------------------------------
    def grow(self, n_new: int, cost=1.0, alpha=None, u=None) -> None:
        """New sources become new arms (one each, as the base class gives them new groups):
        the first and last layers are widened with zero weights for the new inputs and
        outputs (new outputs start at the mean bias of the old ones), stored transitions are
        padded with zeros, and the optimiser restarts (its moments no longer fit)."""
        if n_new <= 0:
            return
        k_old = self.arms.k
        super().grow(n_new, cost, alpha, u)
        self.arms.add_sources(np.arange(k_old, k_old + n_new))
        k = self.arms.k
        first = self.q.net[0]
        last = self.q.net[-1]
        with torch.no_grad():
            new_first = _linear(2 * k, first.out_features, device=self.device)
            new_first.weight.zero_()
            new_first.weight[:, :k_old] = first.weight[:, :k_old]
            new_first.weight[:, k:k + k_old] = first.weight[:, k_old:]
            new_first.bias.copy_(first.bias)
            new_last = _linear(last.in_features, k, device=self.device)
            new_last.weight.zero_()
            new_last.weight[:k_old] = last.weight
            # with no old output (the crawl started without sources) the new ones start at 0
            new_last.bias.fill_(float(last.bias.mean()) if k_old else 0.0)
            new_last.bias[:k_old] = last.bias
        self.q.net[0] = new_first
        self.q.net[-1] = new_last
        self.opt = self._make_optimizer()
        self.x = np.concatenate([self.x, np.zeros(n_new)])
        self.y = np.concatenate([self.y, np.zeros(n_new)])

        def widen(buf):
            out = np.zeros((buf.shape[0], 2 * k), dtype=np.float32)
            out[:, :k_old], out[:, k:k + k_old] = buf[:, :k_old], buf[:, k_old:]
            return out
        self.buf_s, self.buf_s2 = widen(self.buf_s), widen(self.buf_s2)

    def global_state(self) -> dict[str, Any]:
        """Everything the network learned, as numpy arrays (no torch object, so the state
        store can save it without pickle)."""
        state = super().global_state()
        n = self.buf_len
        state.update(
            config=asdict(self.config),
            arm=self.arms.arm.copy(), pointer=self.arms.pointer.copy(),
            x=self.x.copy(), y=self.y.copy(),
            network={k: v.detach().cpu().numpy().copy()
                     for k, v in self.q.state_dict().items()},
            optimizer=_to_numpy(self.opt.state_dict()),
            torch_generator=self.gen.get_state().numpy().copy(),
            noise_generator=None if self.noise_gen is self.gen
            else self.noise_gen.get_state().numpy().copy(),
            replay={"s": self.buf_s[:n].copy(), "a": self.buf_a[:n].copy(),
                    "r": self.buf_r[:n].copy(), "s2": self.buf_s2[:n].copy(),
                    "pos": self.buf_pos, "capacity": self.buf_s.shape[0]},
            steps=self.steps, updates=self.updates,
        )
        return state

    def load_global_state(self, state: dict[str, Any]) -> None:
        super().load_global_state(state)
        arm = np.asarray(state["arm"])
        self.arms = RoundRobinArms(arm)
        self.arms.pointer[:] = state["pointer"]
        k = self.arms.k
        if self.q.net[-1].out_features != k:
            self.q = QNetwork(k, tuple(self.config.hidden), self.gen).to(self.device)
        self.q.load_state_dict({key: torch.as_tensor(np.asarray(v)).to(self.device)
                                for key, v in state["network"].items()})
        self.opt = self._make_optimizer()
        self.opt.load_state_dict(_to_torch(state["optimizer"], self.device))
        self.gen.set_state(torch.as_tensor(np.asarray(state["torch_generator"],
                                                      dtype=np.uint8)))
        noise = state.get("noise_generator")
        if self.noise_gen is not self.gen:      # on a GPU: its own generator, as it was saved
            if noise is None:                   # (a state from the CPU: seeded afresh)
                self.noise_gen = self._noise_generator()
            else:
                self.noise_gen.set_state(torch.as_tensor(np.asarray(noise, dtype=np.uint8)))
        self.x = np.array(state["x"], dtype=np.float64)
        self.y = np.array(state["y"], dtype=np.float64)
        rep = state["replay"]
        cap = int(rep["capacity"])
        n = np.asarray(rep["s"]).shape[0]
        self.buf_s = np.zeros((cap, 2 * k), dtype=np.float32)
        self.buf_s2 = np.zeros((cap, 2 * k), dtype=np.float32)
        self.buf_a = np.zeros(cap, dtype=np.int64)
        self.buf_r = np.zeros(cap, dtype=np.float32)
        self.buf_s[:n], self.buf_s2[:n] = rep["s"], rep["s2"]
        self.buf_a[:n], self.buf_r[:n] = rep["a"], rep["r"]
        self.buf_pos, self.buf_len = int(rep["pos"]), n
        self.steps, self.updates = int(state["steps"]), int(state["updates"])


def _to_numpy(obj: Any) -> Any:
    """An optimiser state dict with its tensors as numpy arrays (nested dicts and lists)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().numpy().copy()
    if isinstance(obj, dict):
        return {k: _to_numpy(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(_to_numpy(v) for v in obj)
    return obj


def _to_torch(obj: Any, device) -> Any:
    """Inverse of :func:`_to_numpy` (arrays back to tensors; Adam's step counts stay on the
    CPU, as torch keeps them)."""
    if isinstance(obj, np.ndarray):
        return torch.as_tensor(obj)
    if isinstance(obj, dict):
        out = {k: _to_torch(v, device) for k, v in obj.items()}
        for key in ("exp_avg", "exp_avg_sq", "momentum_buffer"):
            if isinstance(out.get(key), torch.Tensor):
                out[key] = out[key].to(device)
        return out
    if isinstance(obj, list | tuple):
        return type(obj)(_to_torch(v, device) for v in obj)
    return obj
