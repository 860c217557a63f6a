"""sim.web.profiles and sim.web.diurnal: rhythms, the periodic simulator, news-diurnal, traces."""

from __future__ import annotations

import numpy as np
import pytest

from scrapy_whittle.core.problem import SourceParams
from scrapy_whittle.report.trace import read_trace, write_trace
from sim.web.diurnal import DiurnalWeb, diurnal_trace
from sim.web.ephemeral import EphemeralWeb
from sim.web.feedweb import FeedWeb
from sim.web.profiles import RATIO_RANGE, DiurnalProfile, draw_profile, newsroom_shape
from sim.web.scenarios import make_scenario, news_mix_params
from sim.web.trace import TraceReplay


@pytest.mark.parametrize("weekend", [False, True])
def test_profile_cumulative_inverse_and_mean(weekend):
    prof = draw_profile(30, 0, weekend=weekend)
    ids = np.arange(30)
    grid = np.linspace(0.0, 2 * prof.period, 4 * 96 * int(prof.period / 24) + 1)
    step = grid[1] - grid[0]                       # a quarter of a bin: exact quadrature
    rate = prof.multiplier(grid[None, :-1] + 0.5 * step, ids[:, None])
    numeric = np.concatenate([np.zeros((30, 1)), np.cumsum(rate * step, axis=1)], axis=1)
    exact = prof.cumulative(grid[None, :], ids[:, None])
    np.testing.assert_allclose(exact, numeric, atol=1e-8)
    np.testing.assert_allclose(prof.cumulative(np.full(30, prof.period)), prof.period)  # mean 1
    t = np.linspace(-30.0, 400.0, 997)
    back = prof.inverse(prof.cumulative(t[None, :], ids[:, None]), ids[:, None])
    np.testing.assert_allclose(back, np.broadcast_to(t, back.shape), atol=1e-9)


def test_population_ranges():
    prof = draw_profile(2000, 1)
    ratio = prof.day_night_ratio()
    assert RATIO_RANGE[0] - 1e-9 <= ratio.min() and ratio.max() <= RATIO_RANGE[1] + 1e-9
    assert 3.5 < np.median(ratio) < 6.5                  # log-uniform on [1.5, 16]: 4.9
    q = newsroom_shape()
    hours = (np.arange(96) + 0.5) / 4
    assert q.mean() == pytest.approx(1.0) and q.min() == 0.0
    assert 9 <= hours[q.argmax()] <= 17 and q[hours < 4].max() < 0.1     # quiet nights
    with pytest.raises(ValueError, match="amplitude"):
        DiurnalProfile(24.0, q, np.array([1.0]), np.array([0]))


def test_epoch_table_is_the_integral():
    prof = draw_profile(5, 2, weekend=True)
    mu = np.array([0.0, 0.1, 0.5, 1.0, 3.0])
    tab = prof.epoch_table(np.full(5, 2.0), np.full(5, 0.5), mu, 1.0)
    assert tab.shape == (5, 168)
    for i, tau in [(0, 3), (1, 40), (2, 130), (3, 167), (4, 12)]:
        s = np.linspace(tau, tau + 1, 40_001)
        mid = 0.5 * (s[1:] + s[:-1])
        f = prof.multiplier(mid, np.full(mid.shape, i)) * np.exp(-mu[i] * (tau + 1 - mid))
        assert tab[i, tau] == pytest.approx(f.mean(), rel=1e-7)


def test_flat_rhythm_is_the_ephemeral_web():
    params = news_mix_params(50, 3)
    flat = DiurnalProfile(24.0, newsroom_shape(), np.zeros(50), np.zeros(50, dtype=int))
    a = DiurnalWeb(params, flat, budget=5)
    b = EphemeralWeb(params, budget=5)
    a.reset(seed=0)
    b.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(60):
        ids = rng.choice(50, 5, replace=False)
        oa, ra, *_ = a.step(ids)
        ob, rb, *_ = b.step(ids)
        assert ra == pytest.approx(rb, rel=1e-10)
        assert oa.new_items.tolist() == ob.new_items.tolist()


def test_stochastic_rewards_average_to_the_mean_dynamics():
    scn = make_scenario("news-diurnal", n=40, budget=40, stochastic=True)
    env = scn.make_env()
    env.reset(seed=1)
    got, expected = [], []
    for t in range(24 * 30):                 # every source every 5 hours, a month
        ids = np.arange(40)[(np.arange(40) + t) % 5 == 0]
        _, reward, _, _, info = env.step(ids)
        got.append(reward)
        expected.append(info["expected_reward"])
    got, expected = np.array(got), np.array(expected)
    # relative error of the mean: well inside 4 standard errors of the realised rewards
    se = got.std() / np.sqrt(got.size)
    assert abs(got.mean() - expected.mean()) < 4 * se


def test_stochastic_arrivals_follow_the_rhythm_and_are_deterministic():
    scn = make_scenario("news-diurnal", n=60, budget=60, stochastic=True)
    runs = []
    for _ in range(2):
        env = scn.make_env()
        env.reset(seed=5)
        pubs, srcs = [], []
        for t in range(24 * 14):
            obs, *_ = env.step(np.arange(60) if t % 6 == 0 else [])
            if obs.item_offsets is not None and obs.item_offsets[-1]:
                pubs.append(obs.item_published)
                srcs.append(np.repeat(obs.sources, np.diff(obs.item_offsets)))
        runs.append((np.concatenate(pubs), np.concatenate(srcs)))
    assert np.array_equal(runs[0][0], runs[1][0])
    pub, src = runs[0]
    prof = scn.profile
    # items arrive where the rhythm is high: the mean multiplier at publication times is
    # E[p^2] / E[p] over the day, well above 1; under a flat rhythm it would be 1
    seen = prof.multiplier(pub, src).mean()
    grid = (np.arange(96) + 0.5) / 4
    p = prof.multiplier(grid[None, :], np.arange(60)[:, None])
    weights = scn.params.rate[:, None] * p
    assert seen == pytest.approx((weights * p).sum() / weights.sum(), rel=0.03)
    assert seen > 1.3


def test_news_diurnal_scenario():
    scn = make_scenario("news-diurnal", n=500)
    mix = make_scenario("news-mix", n=500)
    assert scn.budget == 5 and scn.day == 24.0 and mix.day == 24.0
    np.testing.assert_array_equal(scn.params.rate, mix.params.rate)
    per = scn.periodic
    assert per.u.shape == (500, 24)
    np.testing.assert_allclose(scn.problem.u, per.mean_u)
    np.testing.assert_allclose(per.mean_u, mix.problem.u, rtol=0.02)   # same daily mean
    week = make_scenario("news-diurnal", n=20, weekend=True)
    assert week.periodic.k == 168
    assert make_scenario("tcns2018").day is None and mix.periodic is None


def test_diurnal_trace_replays(tmp_path):
    params = news_mix_params(8, 4)
    prof = draw_profile(8, 4)
    trace = diurnal_trace(params, prof, 24.0 * 10, seed=0)
    assert trace.names[0] == "feed-00000"
    counts = np.bincount(trace.source, minlength=8)
    expected = params.rate * prof.cumulative(np.full(8, 240.0))
    assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected) + 1)
    path = tmp_path / "diurnal.csv"
    write_trace(trace, path)
    again = read_trace(path)
    assert again.names == trace.names
    np.testing.assert_allclose(again.time, trace.time, atol=1e-6)
    env = TraceReplay(again, budget=2, decay=params.decay, start=0.0)
    env.reset()
    total = sum(env.step([t % 8, (t + 4) % 8])[1] for t in range(240))
    assert total > 0


def test_trace_command(tmp_path, capsys):
    from sim.web.make_trace import main

    out = tmp_path / "t.csv"
    assert main(["--n", "5", "--days", "3", "--out", str(out)]) == 0
    trace = read_trace(out)
    assert len(trace.names) == 5 and 0 <= trace.time.min() and trace.time.max() < 72
    assert "written to" in capsys.readouterr().out
    assert main(["--n", "0", "--out", str(out)]) == 2


def test_feed_web_with_a_rhythm():
    scn = make_scenario("news-diurnal", n=6)
    web = FeedWeb(scn.params, seed=0, window=100_000, profile=scn.profile)
    items = [it for i in range(6) for it in web.feed(i, 24.0 * 30)]
    pub = np.array([it.published for it in items])
    src = np.array([it.source for it in items])
    assert scn.profile.multiplier(pub, src).mean() > 1.3     # as in DiurnalWeb
    again = FeedWeb(scn.params, seed=0, window=100_000, profile=scn.profile)
    assert [it.published for it in again.feed(3, 24.0 * 30)] == \
        [it.published for it in items if it.source == 3]


def test_bad_input():
    params = news_mix_params(3, 0)
    with pytest.raises(ValueError, match="profile describes"):
        DiurnalWeb(params, draw_profile(4), budget=1)
    with pytest.raises(ValueError, match="window needs"):
        DiurnalWeb(params, draw_profile(3), budget=1, window=5)
    env = DiurnalWeb(params, draw_profile(3), budget=1)
    with pytest.raises(RuntimeError):
        env.step([0])
    with pytest.raises(ValueError, match="whole number of bins"):
        draw_profile(3).epoch_table(params.rate, params.mean_utility, params.decay, 0.3)
    with pytest.raises(ValueError, match="duration"):
        diurnal_trace(SourceParams([1.0], 1.0, 0.1), draw_profile(1), 0.0)
