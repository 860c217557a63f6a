"""The warm start, the users' measures and the first-look oracle."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.policies.oracle import WhittlePolicy
from scrapy_whittle.core.problem import Problem, SourceParams
from sim.bench.first_look import FirstLookOracle
from sim.bench.measures import UserMeasures
from sim.bench.policies import evaluate, learning_curve
from sim.web.diurnal import DiurnalWeb
from sim.web.ephemeral import EphemeralWeb, stationary_state
from sim.web.feedweb import FeedWeb
from sim.web.profiles import draw_profile
from sim.web.scenarios import TCNS2018_PARAMS, make_scenario, news_mix_params

N = 4000


def alike(rate=2.0, xi=1.0, mu=0.1, n=N) -> SourceParams:
    return SourceParams(rate=np.full(n, rate), mean_utility=np.full(n, xi),
                        decay=np.full(n, mu), period=1.0)


def first_crawl(env, seed=7):
    env.reset(seed=seed)
    obs, reward, _, _, info = env.step(np.arange(env.n))
    return obs, reward, info


def test_warm_first_crawl_shows_a_full_window_from_the_stationary_law():
    rate, mu, w = 2.0, 0.1, 10
    obs, reward, info = first_crawl(EphemeralWeb(alike(rate, 1.0, mu), budget=N,
                                                 stochastic=True, window=w, start="warm"))
    assert np.all(obs.new_items == w) and obs.window_full.all()
    age = obs.time[0] - obs.item_published
    assert np.all(age > 0)
    # the j-th newest entry of a Poisson process since -infinity is Gamma(j, rate) old
    assert age.mean() == pytest.approx((w + 1) / (2 * rate), rel=0.02)
    oldest = age[np.cumsum(obs.new_items) - 1]
    assert oldest.mean() == pytest.approx(w / rate, rel=0.02)
    # each is worth xi E[exp(-mu A_j)] = xi r^j, r = rate / (rate + mu)
    r = rate / (rate + mu)
    assert reward / N == pytest.approx(r * (1 - r**w) / (1 - r), rel=0.02)
    assert info["missed_items"] == 0               # nothing published since the start yet


def test_warm_lifetime_and_unbounded_stocks_hold_the_stationary_value():
    p = alike(3.0, 2.0, 0.2)
    obs, reward, _ = first_crawl(EphemeralWeb(p, budget=N, stochastic=True, lifetime=4.0,
                                              start="warm"))
    assert obs.new_items.mean() == pytest.approx(3.0 * 4.0, rel=0.02)
    assert np.all(obs.time[0] - obs.item_published < 4.0)
    assert reward / N == pytest.approx(stationary_state(p, 4.0)[0], rel=0.02)
    _, reward, _ = first_crawl(EphemeralWeb(p, budget=N, stochastic=True, start="warm"))
    assert reward / N == pytest.approx(3.0 * 2.0 / 0.2, rel=0.02)


def test_warm_deterministic_starts_at_the_never_crawled_value_and_keeps_it():
    env = EphemeralWeb(TCNS2018_PARAMS, budget=1, start="warm")
    env.reset(seed=0)
    stationary = env.problem.u / (1 - env.problem.alpha)
    assert np.allclose(env.expected_state(), stationary, rtol=1e-12)
    _, r0, *_ = env.step([0])
    _, r1, *_ = env.step([1])
    assert r0 == pytest.approx(stationary[0], rel=1e-12)
    assert r1 == pytest.approx(stationary[1], rel=1e-12)      # untouched one epoch on
    _, r2, *_ = env.step([0])
    assert r2 == pytest.approx(env.problem.u[0] * (1 + env.problem.alpha[0]), rel=1e-12)
    life = EphemeralWeb(TCNS2018_PARAMS, budget=1, start="warm", lifetime=2.0)
    life.reset(seed=0)
    p = TCNS2018_PARAMS
    assert np.allclose(life.expected_state(),
                       p.rate * p.mean_utility * -np.expm1(-2.0 * p.decay) / p.decay)


def test_warm_diurnal_never_crawled_value_is_the_periodic_stationary_cycle():
    p = news_mix_params(5, 3)
    prof = draw_profile(5, 3, day=24.0)
    env = DiurnalWeb(p, prof, budget=1, start="warm")
    env.reset(seed=0)
    per = env.periodic
    x = np.zeros(5)
    for t in range(24 * 400):                  # the recursion run from long before time 0
        x = per.alpha * x + per.u[:, t % 24]
    for t in range(30):
        assert np.allclose(env.expected_state(), x, rtol=1e-9)
        env.step([])
        x = per.alpha * x + per.u[:, t % 24]


def test_empty_start_replays_the_trajectory_from_before_the_warm_start():
    # rewards recorded with the simulators as they were before ``start`` existed
    env = EphemeralWeb(TCNS2018_PARAMS, budget=2, stochastic=True, window=30, lifetime=3.0,
                       start="empty")
    env.reset(seed=5)
    got = [env.step([t % 4, (t + 1) % 4])[1] for t in range(12)]
    assert got == [0.0, 33.344351939042944, 7.390874454296219, 31.48609644014842,
                   42.44087197095715, 25.03710741262535, 7.770895480673447, 37.15905222012711,
                   47.289857027449074, 27.301529488480682, 8.662230515116775,
                   38.090404202207644]
    env = DiurnalWeb(news_mix_params(6, 2), draw_profile(6, 2, day=24.0), budget=2,
                     stochastic=True, window=5)
    env.reset(seed=5)
    got = [env.step([t % 6, (t + 1) % 6])[1] for t in range(12)]
    assert got == [0.0, 1.8529078517689415, 1.5411336881100364, 0.0008981147824229525, 0.0,
                   0.0, 0.3637061667406305, 2.4041600967530457, 2.1565591734174765,
                   10.178180208907058, 6.326573714688202, 0.15150091393098]


def test_missed_items_count_what_left_the_window_since_the_start():
    p = alike(50.0, 1.0, 0.1, n=200)
    for start in ("empty", "warm"):
        env = EphemeralWeb(p, budget=200, stochastic=True, window=20, start=start)
        env.reset(seed=1)
        for _ in range(3):
            env.step([])
        obs, _, _, _, info = env.step(np.arange(200))
        # 150 expected arrivals since the start per source, 20 of them still listed
        assert info["missed_items"] / 200 == pytest.approx(130, rel=0.03)
        assert np.all(obs.new_items == 20)
        out = env.outstanding()                 # one more epoch: 50 arrivals, 30 gone
        assert out["published"] / 200 == pytest.approx(50, rel=0.03)
        assert out["missed"] / 200 == pytest.approx(30, rel=0.05)


def test_feedweb_warm_lists_its_stock_and_then_the_empty_webs_items():
    p = alike(1.5, 1.0, 0.1, n=3)
    warm, empty = FeedWeb(p, seed=2, window=8, start="warm"), FeedWeb(p, seed=2, window=8)
    for i in range(3):
        first = warm.feed(i, 0.0)
        assert len(first) == 8 and all(it.published < 0 for it in first)
        later = [it.published for it in warm.feed(i, 5.0) if it.published >= 0]
        assert later == [it.published for it in empty.feed(i, 5.0)][:len(later)]
    new, value = warm.fetch(0, 5.0)
    assert len(new) == 8 and value > 0


def test_scenario_starts():
    assert make_scenario("news-mix", n=10).start == "warm"
    assert make_scenario("news-diurnal", n=10).start == "warm"
    assert make_scenario("tcns2018").start == "empty"
    assert "start" not in make_scenario("tcns2018").options      # the papers' env unchanged
    warm = make_scenario("tcns2018", start="warm")
    assert np.allclose(warm.problem.initial_state, warm.problem.u / (1 - warm.problem.alpha))
    with pytest.raises(ValueError, match="warm"):
        make_scenario("icc2021-single", start="warm")
    with pytest.raises(ValueError, match="start"):
        make_scenario("news-mix", n=10, start="hot")


class _Settled:
    def outstanding(self):
        return {"published": 5, "missed": 2}


def test_measures_of_a_source_crawled_every_third_epoch():
    """Items at times 0.5, 1.5, 2.5 captured at 3; 3.5 at 6; one found gone at 6; at the end
    5 items still out there, 2 of them gone. A stock item (published < 0) counts nowhere."""
    m = UserMeasures()
    crawls = [(3.0, [2.5, 1.5, 0.5, -4.0], 0), (6.0, [3.5], 1)]
    for epoch, (time, pubs, missed) in enumerate(crawls):
        m.add(Observation(epoch=epoch, sources=[0], time=time, new_items=[len(pubs)],
                          reward=[1.0], item_offsets=[0, len(pubs)], item_published=pubs),
              {"missed_items": missed})
    m.settle(_Settled())
    s = m.summary(minutes_per_unit=60.0)
    delays = np.array([0.5, 1.5, 2.5, 2.5])
    assert s["delay_mean"] == pytest.approx(delays.mean())
    assert s["delay_median"] == pytest.approx(2.0)
    assert s["delay_p90"] == pytest.approx(np.quantile(delays, 0.9))
    assert s["delay_mean_minutes"] == pytest.approx(60 * delays.mean())
    assert s["items_captured"] == 4 and s["items_missed"] == 3
    assert s["items_published"] == 4 + 3 + 3
    assert s["missed_share"] == pytest.approx(0.3)
    assert s["crawls_per_item"] == pytest.approx(0.5)


def test_measures_absent_for_the_mean_dynamics():
    m = UserMeasures()
    m.add(Observation(epoch=0, sources=[0], time=0.0, new_items=[1], reward=[1.0]), {})
    assert m.summary() is None


def test_learning_curve_shares():
    runs = {"first-look": [np.full(60, 2.0)], "x": [np.r_[np.zeros(24), np.full(36, 4.0)]]}
    c = learning_curve(runs, bound=4.0, horizon=60)
    assert list(c["x"]) == ["24", "48"]
    assert c["x"]["24"]["of_bound"] == 0.0
    assert c["x"]["48"]["of_bound"] == pytest.approx(0.5)
    assert c["x"]["48"]["of_first_look"] == pytest.approx(1.0)
    assert c["first-look"]["24"]["of_first_look"] == 1.0


def _observe(policy, epoch, ids):
    ids = np.asarray(ids)
    policy.observe(Observation(epoch=epoch, sources=ids, time=float(epoch),
                               new_items=np.ones(ids.size), reward=np.ones(ids.size)))


def test_first_look_follows_the_population_then_equals_the_oracle():
    p = news_mix_params(12, 4)
    for x0 in (None, stationary_state(p)):
        problem = Problem.from_params(p, initial_state=x0)
        first, oracle = FirstLookOracle(problem), WhittlePolicy(problem)
        prio = first.priority(0)
        assert np.all(prio == prio[0])                     # one shared population value
        expected = np.mean(first._table.index(np.zeros(12) if x0 is None else x0))
        assert prio[0] == pytest.approx(expected)
        assert first.select(0, 3).tolist() == [0, 1, 2]   # a sweep by id
        for t in range(4):
            ids = [3 * t, 3 * t + 1, 3 * t + 2]
            first.select(t, 3)
            oracle.select(t, 3)
            _observe(first, t, ids)
            _observe(oracle, t, ids)
        assert first.known.all()
        for t in range(4, 40):
            a, b = first.select(t, 3), oracle.select(t, 3)
            assert np.array_equal(np.sort(a), np.sort(b))
            assert np.array_equal(first.priority(t), oracle.priority(t))
            _observe(first, t, a)
            _observe(oracle, t, b)


def test_bench_measures_are_deterministic_and_first_look_runs_for_the_curve():
    sc = make_scenario("news-mix", n=40, budget=2, stochastic=True)
    a = evaluate(sc, ["whittle"], horizon=30, seeds=2, warmup=0, curve=True)
    b = evaluate(sc, ["whittle"], horizon=30, seeds=2, warmup=0, curve=True)
    assert [r["policy"] for r in a["results"]] == ["whittle", "first-look"]
    assert a["start"] == "warm"
    for ra, rb in zip(a["results"], b["results"], strict=True):
        assert ra["measures"] == rb["measures"] and ra["curve"] == rb["curve"]
    m = a["results"][0]["measures"]
    assert m["items_captured"] > 0 and math.isfinite(m["delay_mean_minutes"])
    assert m["items_published"] >= m["items_captured"] + m["items_missed"]
    det = evaluate(make_scenario("tcns2018"), ["oracle"], horizon=10, seeds=1)
    assert det["results"][0]["measures"] is None and "curve" not in det["results"][0]
