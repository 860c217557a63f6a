"""ProfileEstimator: daily rhythms from publication times, against batch references."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from scrapy_whittle.core.estimators.profile import ProfileEstimator

DAY = 24.0


def fourier(coef: np.ndarray, t: np.ndarray) -> np.ndarray:
    h = coef.shape[-1] // 2
    k = np.arange(1, h + 1)
    ph = np.multiply.outer(t, 2 * np.pi * k / DAY)
    return 1.0 + (coef[..., :h] * np.cos(ph)).sum(-1) + (coef[..., h:] * np.sin(ph)).sum(-1)


def arrivals(rate: float, coef: np.ndarray, t_end: float, rng) -> np.ndarray:
    """Poisson arrivals of intensity rate * p(t) on [0, t_end), by thinning."""
    top = rate * (1.0 + np.abs(coef).sum())
    cand = np.sort(rng.uniform(0.0, t_end, rng.poisson(top * t_end)))
    keep = rng.uniform(size=cand.shape) * top < rate * fourier(coef, cand)
    return cand[keep]


def crawl_all(est, times_per_source, every: float, t_end: float, window=None):
    """Crawl every source every ``every`` time units; each crawl shows the items published
    since the previous one (the newest ``window`` of them)."""
    n = len(times_per_source)
    ids = np.arange(n)
    prev = np.zeros(n)
    t = every
    while t <= t_end:
        off, pubs, full = [0], [], []
        for i, times in enumerate(times_per_source):
            new = times[(times >= prev[i]) & (times < t)][::-1]
            full.append(window is not None and new.shape[0] >= window)
            if window is not None:
                new = new[:window]
            pubs.extend(new)
            off.append(len(pubs))
        est.observe_crawls(ids, np.full(n, t), off, pubs, full, start=0.0)
        prev[:] = t
        t += every


def test_statistics_equal_a_batch_computation():
    rng = np.random.default_rng(0)
    coef = np.array([0.6, 0.1, -0.4, 0.2])
    times = [arrivals(3.0, coef, 24 * 10, rng)]
    est = ProfileEstimator(1, day=DAY, harmonics=2)
    crawl_all(est, times, 5.0, 24 * 10)
    seen = times[0][times[0] < 5.0 * 48]               # up to the last crawl, at 240
    w = 2 * np.pi / DAY
    assert est.items[0] == seen.shape[0]
    assert est.exposure[0] == pytest.approx(240.0)
    for k in (1, 2):
        assert est.item_cos[0, k - 1] == pytest.approx(np.cos(k * w * seen).sum(), abs=1e-3)
        assert est.item_sin[0, k - 1] == pytest.approx(np.sin(k * w * seen).sum(), abs=1e-3)
        assert est.exp_cos[0, k - 1] == pytest.approx(np.sin(k * w * 240) / (k * w), abs=1e-4)
        assert est.exp_sin[0, k - 1] == pytest.approx((1 - np.cos(k * w * 240)) / (k * w),
                                                      abs=1e-4)


def test_recovers_a_known_rhythm_and_its_phase():
    rng = np.random.default_rng(1)
    n = 30
    # one shared shape in many time zones: the group spread is real, so little shrinkage
    shifts = rng.uniform(0, DAY, n)
    base = np.array([0.7, 0.2, 0.0, 0.0])
    coef = np.empty((n, 4))
    for i, s in enumerate(shifts):             # p(t) = base(t - s)
        for k in (1, 2):
            c, d = base[k - 1], base[k + 1]
            a = 2 * np.pi * k * s / DAY
            coef[i, k - 1] = c * np.cos(a) - d * np.sin(a)
            coef[i, k + 1] = c * np.sin(a) + d * np.cos(a)
    times = [arrivals(4.0, coef[i], 24 * 14, rng) for i in range(n)]
    est = ProfileEstimator(n, day=DAY, harmonics=2)
    crawl_all(est, times, 7.0, 24 * 14)
    got = est.coefficients()
    se = np.sqrt(2.0 / est.items)[:, None]
    assert np.all(np.abs(got - coef) < 4.5 * se), np.abs(got - coef) / se
    # the estimated peak hour is the true one, within an hour, for every source
    grid = np.linspace(0, DAY, 24 * 12, endpoint=False)
    true_peak = grid[fourier(coef[:, None, :], grid).argmax(axis=1)]
    est_peak = grid[est.multiplier(grid[None, :], np.arange(n)[:, None]).argmax(axis=1)]
    gap = np.abs((est_peak - true_peak + DAY / 2) % DAY - DAY / 2)
    assert gap.max() < 1.0


def test_flat_sources_shrink_to_flat_and_sparse_ones_to_their_group():
    rng = np.random.default_rng(2)
    flat = [arrivals(2.0, np.zeros(4), 24 * 7, rng) for _ in range(40)]
    est = ProfileEstimator(40, day=DAY, harmonics=2)
    crawl_all(est, flat, 6.0, 24 * 7)
    raw = est.raw()[0]
    assert np.abs(raw).max() > 0.1                 # sampling noise of the raw estimates
    assert np.abs(est.coefficients()).max() < 0.05  # shrunk away

    # two groups with opposite rhythms; the last source of each has only a few items
    strong = np.array([0.8, 0.0, 0.0, 0.0])
    times = [arrivals(3.0, strong, 24 * 7, rng) for _ in range(20)] + \
        [arrivals(3.0, -strong, 24 * 7, rng) for _ in range(20)]
    times[19] = times[19][:4]
    times[39] = times[39][:4]
    est = ProfileEstimator(40, day=DAY, harmonics=2)
    est.set_groups(np.arange(40), np.repeat([0, 1], 20))
    crawl_all(est, times, 6.0, 24 * 7)
    got = est.coefficients()
    assert got[19, 0] > 0.5 and got[39, 0] < -0.5
    assert abs(got[19, 0] - 0.8) < abs(est.raw()[0][19, 0] - 0.8) + 1e-12


def test_many_groups_pool_as_each_group_alone():
    # the groups' means and spreads (computed for all groups at once) are those of each
    # group estimated by itself; a group without data stays flat
    rng = np.random.default_rng(5)
    shapes = [np.array([0.8, 0.0, 0.0, 0.0]), np.array([0.0, -0.6, 0.2, 0.0])]
    times = [arrivals(3.0, shapes[i % 2], 24 * 7, rng) for i in range(30)]
    times[29] = np.zeros(0)                       # group 2 below: one source, no items
    groups = np.array([i % 2 for i in range(29)] + [2])
    est = ProfileEstimator(30, day=DAY, harmonics=2)
    est.set_groups(np.arange(30), groups)
    crawl_all(est, times, 6.0, 24 * 7)
    position, means, tau2 = est._group_stats()
    for g in (0, 1):
        alone = ProfileEstimator(15, day=DAY, harmonics=2)
        crawl_all(alone, [t for t, gg in zip(times, groups, strict=True) if gg == g], 6.0,
                  24 * 7)
        _, m, t2 = alone._group_stats()
        np.testing.assert_allclose(means[position[groups == g][0]], m[0], atol=1e-12)
        np.testing.assert_allclose(tau2[position[groups == g][0]], t2[0], atol=1e-12)
    assert not means[position[29]].any() and not tau2[position[29]].any()
    assert np.abs(est.coefficients()[29]).max() == 0.0


def test_many_groups_without_any_data_stay_flat():
    est = ProfileEstimator(6, day=DAY, harmonics=2)
    est.set_groups(np.arange(6), np.array([0, 1, 2, 0, 1, 2]))
    assert not est.coefficients().any()


def test_decayed_integral_is_the_quadrature():
    est = ProfileEstimator(3, day=DAY, harmonics=2)
    est._cache = np.array([[0.5, 0.1, -0.3, 0.05], [0, 0, 0, 0], [0.9, 0, 0, 0.0]])
    a = np.array([1.0, 5.0, 30.0])
    b = np.array([20.0, 5.5, 80.0])
    mu = np.array([0.3, 0.0, 0.05])
    got = est.decayed_integral(a, b, mu)
    for i in range(3):
        s = np.linspace(a[i], b[i], 200_001)
        mid = 0.5 * (s[1:] + s[:-1])
        f = est.multiplier(mid, np.full(mid.shape, i)) * np.exp(-mu[i] * (b[i] - mid))
        assert got[i] == pytest.approx(f.sum() * (s[1] - s[0]), rel=1e-8)


def test_profile_never_negative():
    est = ProfileEstimator(2, day=DAY, harmonics=2, floor=0.05)
    est.items[:] = 1e6                     # so much data that nothing is shrunk
    est.exposure[:] = 24.0 * 1000
    est.item_cos[0] = [1.5 * 0.5 * 1e6, 0.0]   # raw c_1 = 1.5: 1 + 1.5 cos dips to -0.5
    est.item_sin[0] = [0.0, 0.0]
    est.group[:] = [0, 1]
    got = est.multiplier(np.linspace(0, DAY, 500)[None, :], np.array([[0]]))
    assert got.min() == pytest.approx(0.05, abs=1e-3)


def test_censoring_first_crawl_full_window_and_garbage():
    est = ProfileEstimator(3, day=DAY, harmonics=1)
    # source 0, first crawl at 10: items at 9, 6, 2; the oldest is the origin, not counted
    # source 1, first crawl, full window: all 3 counted over (oldest, 10]
    # source 2: an undated item, one from the future, one fine
    acc = est.observe_crawls([0, 1, 2], [10.0, 10.0, 10.0], [0, 3, 6, 9],
                             [9.0, 6.0, 2.0, 9.0, 8.0, 7.0, np.nan, 11.0, 4.0],
                             [False, True, False])
    assert acc.all()
    assert est.items.tolist() == [2.0, 3.0, 0.0]       # source 2: 4.0 is its own origin
    assert est.exposure.tolist() == pytest.approx([8.0, 3.0, 6.0])
    # a crawl back in time is refused and changes nothing
    before = est.state_dict()
    acc = est.observe_crawls([0], [9.0], [0, 1], [8.5])
    assert not acc[0] and est.items[0] == before["items"][0]
    # a later crawl: items after the previous crawl only, over (10, 20]
    est.observe_crawls([0], [20.0], [0, 2], [15.0, 9.5])
    assert est.items[0] == 3.0 and est.exposure[0] == pytest.approx(18.0)
    with pytest.raises(ValueError, match="at most once"):
        est.observe_crawls([1, 1], [30.0, 31.0], [0, 0, 0], [])
    with pytest.raises(ValueError, match="offsets"):
        est.observe_crawls([1], [30.0], [0, 2], [1.0])
    with pytest.raises(ValueError, match="harmonics"):
        ProfileEstimator(1, harmonics=0)


def test_state_grow_and_size():
    rng = np.random.default_rng(4)
    est = ProfileEstimator(5, day=DAY, harmonics=2)
    times = [arrivals(2.0, np.array([0.5, 0, 0, 0]), 48, rng) for _ in range(5)]
    crawl_all(est, times, 8.0, 48)
    est.grow(2)
    assert est.n == 7 and est.item_cos.dtype == np.float32
    copy = ProfileEstimator(0, day=DAY, harmonics=2)
    copy.load_state_dict(pickle.loads(pickle.dumps(est.state_dict())))
    assert np.array_equal(copy.coefficients(), est.coefficients())
    per_source = sum(getattr(est, name).nbytes for name in est._cols) / est.n
    assert per_source == 60.0                 # 28 + 16 H bytes


def test_kept_raw_coefficients_equal_a_fresh_computation():
    """raw() keeps every source's raw coefficients and recomputes those whose evidence
    changed (crawls of some sources, a reset): the same numbers as computing them all."""
    rng = np.random.default_rng(3)
    n = 30
    est = ProfileEstimator(n, day=DAY, harmonics=2)
    times = [arrivals(2.0, rng.normal(0.0, 0.3, 4), 24 * 6, rng) for _ in range(n)]
    prev = np.zeros(n)
    for step in range(1, 30):
        t = 5.0 * step
        ids = np.flatnonzero(rng.random(n) < 0.4)       # some sources crawled now
        off, pubs = [0], []
        for i in ids:
            new = times[i][(times[i] >= prev[i]) & (times[i] < t)][::-1]
            pubs.extend(new)
            off.append(len(pubs))
            prev[i] = t
        est.observe_crawls(ids, np.full(ids.shape[0], t), off, pubs, start=0.0)
        if step == 15:
            est.reset(ids[:2])
        kept = est.raw()
        fresh = est._raw_of(slice(None))
        for a, b in zip(kept, fresh, strict=True):
            np.testing.assert_array_equal(a, b)
    assert np.isfinite(est.raw()[1]).sum() > n // 2         # most sources have a rhythm


def _strong_rhythms(n: int, seed: int) -> ProfileEstimator:
    """n sources with strong rhythms (the positivity check scales many of them down), every
    seventh without any dated item."""
    rng = np.random.default_rng(seed)
    est = ProfileEstimator(n, day=DAY, harmonics=2, floor=0.05)
    times = [arrivals(rng.uniform(0.5, 3.0), rng.normal(0.0, 0.6, 4), 24 * 5, rng)
             if i % 7 else np.array([]) for i in range(n)]
    crawl_all(est, times, 4.0, 24 * 5)
    return est


@pytest.mark.parametrize("groups", [None, 3])
def test_coefficients_of_some_sources_equal_those_of_all(groups):
    """A selection asks for the profiles of the few sources it ranks: computed for those rows
    alone (the cache stale), each is the same, to the last bit, as in the whole array,
    whichever rows come along (one row too: a matrix product of one row rounds otherwise)."""
    n = 60
    est = _strong_rhythms(n, seed=5)
    if groups:
        est.set_groups(np.arange(n), np.arange(n) % groups)
    whole = est.coefficients()
    # profiles scaled to the floor (on the check's grid, the hours here) are among them
    low = est.multiplier(np.arange(24.0)[None, :], np.arange(n)[:, None]).min(axis=1)
    scaled = np.flatnonzero(np.abs(low - 0.05) < 1e-9)
    assert scaled.size >= 5
    rng = np.random.default_rng(0)
    alone = [[i] for i in scaled]
    for ids in (*alone, [0, 59], rng.choice(n, 10, replace=False), np.arange(29)):
        ids = np.asarray(ids)
        fresh = ProfileEstimator(0, day=DAY, harmonics=2, floor=0.05)
        fresh.load_state_dict(est.state_dict())
        if groups:
            fresh.set_groups(np.arange(n), np.arange(n) % groups)
        assert np.array_equal(fresh.coefficients(ids), whole[ids])
        assert fresh._cache is None                         # computed for those rows only


@pytest.mark.parametrize(("groups", "ids"), [(None, np.arange(60)), (4, np.arange(60)),
                                             (4, np.arange(0, 60, 5))])
def test_integral_bound_holds_at_every_phase(groups, ids):
    """integral_bound (what a pruned selection ranks by) is at least the decayed integral of
    the learned profile over any window of the same length, whatever the time of day; and
    below the peak-rate bound where the decay is slower than the day. For every source, or
    a few (computed for those alone). Given the window's end (the selection's now) and the
    decay rate, it holds too and is nearly exact for a window long against 1 / mu, for the
    profiles the positivity check leaves alone and, where their rhythm is above its mean,
    for those it scales down, where the bound for any time of day is not."""
    est = _strong_rhythms(60, seed=6)
    if groups:
        est.set_groups(np.arange(60), np.arange(60) % groups)
    n = ids.shape[0]
    coef = est.coefficients()[ids]
    peak = 1.0 + np.hypot(coef[:, :2], coef[:, 2:]).sum(axis=1)
    # profiles the positivity check cannot reach (with room for rounding), scaled ones too
    unscaled = 2.0 - peak >= 0.05 + 1e-6
    assert np.all(coef[unscaled] == est._shrunk(ids)[unscaled])
    assert 3 <= unscaled.sum() < n
    loose = 0.0
    scaled_up = 0
    for mu in (0.0, 0.005, 0.2, 3.0):
        for span in (0.25, 5.0, 30.0, 400.0):
            flat = span if mu == 0 else -np.expm1(-mu * span) / mu
            bound = est.integral_bound(np.full(n, flat), ids)
            for b in np.linspace(0.0, DAY, 97):
                exact = est.decayed_integral(np.full(n, b - span), np.full(n, b),
                                             np.full(n, mu), ids)
                assert np.all(exact <= bound * (1 + 1e-12))
                at_b = est.integral_bound(np.full(n, flat), ids, np.full(n, mu), b)
                assert np.all(exact <= at_b * (1 + 1e-12)) and np.all(at_b <= bound)
                if mu * span >= 30:
                    gap = (at_b - exact)[unscaled] / flat
                    assert np.all(gap <= 1e-9), (mu, span, b, gap.max())
                    # and for the scaled ones where their rhythm is above its mean (their
                    # factor is bounded exactly there)
                    up = ~unscaled & (exact >= flat)
                    gap = (at_b - exact)[up] / flat
                    assert np.all(gap <= 1e-9), (mu, span, b, gap.max())
                    scaled_up += int(up.sum())
                    loose = max(loose, float(np.max((bound - exact)[unscaled] / flat)))
            if mu < 0.01 and span > 30:
                # (the harmonics' part at most 2 / (k w) = 7.6 h in place of ``flat``)
                assert np.all(bound - flat <= 0.05 * (peak - 1.0) * flat)
    assert loose > 0.1                  # (the bound for any time of day is far from exact)
    assert scaled_up > 100


def test_scale_bound_is_at_least_the_positivity_factor_from_any_grid_point():
    """The bound of the positivity check's factor that integral_bound takes is at least the
    factor (to rounding) whatever grid point a source's trough is remembered at (a stale
    one: its profile moved since), and the factor itself once the point is the lowest: the
    first time, or after _positive checked the source."""
    rng = np.random.default_rng(4)
    n, h = 500, 2
    est = ProfileEstimator(n, day=DAY, harmonics=h, floor=0.05)
    ids = np.arange(n)
    harmonics = [(rng.normal(0.0, 0.6, n), rng.normal(0.0, 0.6, n)) for _ in range(h)]
    coef = np.stack([harmonics[0][0], harmonics[1][0], harmonics[0][1], harmonics[1][1]],
                    axis=1)
    with np.errstate(invalid="ignore"):
        factor = est._positive(coef)[:, 0] / coef[:, 0]
    assert np.mean(factor < 1.0) > 0.5
    exact = est._scale_bound(harmonics, ids)                # (troughs found here)
    assert np.allclose(exact, factor, rtol=1e-12, atol=0.0)
    est._trough[:] = rng.integers(0, 8 * h + 8, n)          # anywhere on the grid
    stale = est._scale_bound(harmonics, ids)
    assert np.all(stale >= factor * (1.0 - 1e-12)) and np.mean(stale > factor + 1e-6) > 0.5
    est._positive(coef, ids)                                 # (it keeps the lowest points)
    assert np.allclose(est._scale_bound(harmonics, ids), factor, rtol=1e-12, atol=0.0)


def test_raw_of_every_source_computes_those_with_evidence_the_same():
    """raw() of every source at once (a first call, growth, a restore) computes only the
    sources with items and exposure; every row equals the formula's for that row alone,
    the others' (no items, no exposure, a NaN exposure) included."""
    est = _strong_rhythms(40, seed=8)                  # every seventh without items
    est.grow(5)                                        # no evidence at all
    est.exposure[41] = 12.0                            # exposure, no items
    est.exposure[42], est.items[42] = 5.0, 1.0         # one item
    est.exposure[3] = np.nan                           # garbage
    whole = est._raw_of(slice(None))
    rows = est._raw_of(np.arange(est.n))
    assert np.array_equal(whole[0], rows[0]) and np.array_equal(whole[1], rows[1])
    assert np.isfinite(whole[1]).sum() == 40 - 6 - 1 + 1   # (not 0, 7, ..., 35, 3; 42)
