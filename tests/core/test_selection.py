from __future__ import annotations

import numpy as np
import pytest

from scrapy_whittle.core.selection import PrunedTop, TopSelector, select_top


def test_unit_costs_take_the_top_k_with_ties_to_the_lower_index():
    prio = np.array([1.0, 5.0, 3.0, 5.0, 0.0, 3.0])
    np.testing.assert_array_equal(select_top(prio, None, 3), [1, 3, 2])
    np.testing.assert_array_equal(select_top(prio, np.ones(6), 3), [1, 3, 2])
    assert select_top(prio, None, 0).size == 0
    np.testing.assert_array_equal(np.sort(select_top(prio, None, 10)), np.arange(6))


def test_costs_fill_the_budget_greedily_in_priority_order():
    prio = np.array([9.0, 8.0, 7.0, 6.0])
    cost = np.array([2.0, 3.0, 1.0, 1.0])
    # 9 (2) fits, 8 (3) does not fit in the 3 left ... 7 (1) and 6 (1) do
    np.testing.assert_array_equal(select_top(prio, cost, 4), [0, 2, 3])
    chosen = select_top(prio, cost, 5)
    assert cost[chosen].sum() <= 5
    np.testing.assert_array_equal(chosen, [0, 1])


def test_nan_priorities_rank_below_every_number():
    prio = np.array([1.0, np.nan, 2.0, np.nan, 0.5, np.nan])
    np.testing.assert_array_equal(select_top(prio, None, 2), [2, 0])
    # more budget than numbers: the numbers first, then the NaNs by index
    np.testing.assert_array_equal(select_top(prio, None, 4), [2, 0, 4, 1])
    np.testing.assert_array_equal(select_top(prio, None, 4, np.array([1, 1, 0, 1, 1, 1], bool)),
                                  [0, 4, 1, 3])


def test_eligible_mask_excludes_sources():
    prio = np.array([9.0, 8.0, 7.0])
    np.testing.assert_array_equal(select_top(prio, None, 2, np.array([False, True, True])),
                                  [1, 2])


@pytest.mark.parametrize("k", [1, 7, 100])
def test_top_selector_equals_select_top_on_drifting_priorities(k):
    rng = np.random.default_rng(k)
    prio = rng.lognormal(size=5000)
    sel = TopSelector()
    for _ in range(30):
        prio = prio * rng.uniform(0.9, 1.15, prio.shape)  # drift, sometimes far
        np.testing.assert_array_equal(sel(prio, None, k), select_top(prio, None, k))
    # a collapse of all priorities forces the fallback path
    np.testing.assert_array_equal(sel(prio * 1e-6, None, k), select_top(prio * 1e-6, None, k))


def _reference_top(prio, k):
    """The k largest by a full sort: higher priority first, ties to the lower index."""
    return np.lexsort((np.arange(prio.shape[0]), -prio))[:k]


@pytest.mark.parametrize("case", ["mass_at_cut", "mass_on_top", "two_masses", "few_values",
                                  "mass_just_above_cut", "distinct"])
@pytest.mark.parametrize("k", [1, 37, 400])
def test_masses_of_equal_priorities_give_the_same_top_as_a_full_sort(case, k):
    # masses of equal priorities take the sampled shortcut (every unexplored source of a
    # new crawl shares one); the result must be exactly the full sort's
    rng = np.random.default_rng(k)
    n = 20_000
    prio = np.full(n, 3.0)
    if case == "mass_at_cut":
        prio[rng.permutation(n)[:k // 2 + 1]] = rng.uniform(3.5, 9.0, k // 2 + 1)
    elif case == "mass_on_top":
        prio[rng.permutation(n)[:n // 3]] = rng.uniform(0.0, 2.0, n // 3)
    elif case == "two_masses":
        prio[: n // 2] = 1.0
        prio[rng.permutation(n)[:k]] = 5.0
        prio[rng.permutation(n)[:k // 3]] = rng.uniform(4.0, 6.0, k // 3)
    elif case == "few_values":
        prio = rng.integers(0, 6, n).astype(np.float64)
    elif case == "mass_just_above_cut":     # the k-th largest is the first value below it
        n = 5 * k + 10
        prio = rng.uniform(0.0, 1.0, n)
        order = rng.permutation(n)
        prio[order[:2]] = 4.0
        prio[order[2:k - 1]] = 3.0          # 2 above, k - 3 in the mass: k - 1 in all
    else:
        prio = rng.lognormal(size=n)
    np.testing.assert_array_equal(select_top(prio, None, k), _reference_top(prio, k))
    eligible = rng.random(n) < 0.7
    cand = np.flatnonzero(eligible)
    np.testing.assert_array_equal(select_top(prio, None, k, eligible),
                                  cand[_reference_top(prio[cand], k)])


@pytest.mark.parametrize("tight", [False, True])
def test_pruned_top_is_select_top_whatever_its_guess(tight):
    """Priorities below a bound; the guessed cut-off drifts, falls far (the second pass), or
    rises; the answer is select_top's over every priority, or None (then the caller computes
    all), and only candidates' priorities are asked for, each once (a second pass keeps the
    first's). The same when the guess is also the k-th largest bound of the candidates
    (``tight``), which the loose bounds here make a bad guess."""
    rng = np.random.default_rng(5)
    n, k = 4000, 40
    pruned = PrunedTop(margin=0.05, tight=tight)
    asked = []

    def priority_of(ids):
        asked.append(ids)
        return prio[ids]

    second_passes = decided = 0
    for t in range(120):
        bound = rng.lognormal(size=n)
        prio = bound * rng.uniform(0.2, 1.0, n)          # never above the bound
        if t % 10 == 5:
            prio *= 0.3                                   # the top falls far: second pass
        eligible = rng.random(n) < 0.9 if t % 4 == 0 else None
        want = select_top(prio, None, k, eligible)
        asked.clear()
        got = pruned(bound, priority_of, k, eligible)
        if got is None:
            got = select_top(prio, None, k, eligible)
            pruned.settled(prio, got)
        else:
            decided += 1
            second_passes += len(asked) == 2
            every = np.concatenate(asked)
            assert every.shape[0] < n                   # not every priority was needed
            assert np.unique(every).shape[0] == every.shape[0]     # none asked twice
        np.testing.assert_array_equal(got, want)
    assert decided > 80 and second_passes > 3
    pruned.forget()
    assert pruned(bound, priority_of, k) is None        # no guess: the caller decides


def test_pruned_top_guesses_the_kth_bound_when_the_cut_off_fell():
    """Thompson sampling's steady state: each epoch's draws move the top by more than the
    margin, and the last cut-off lies above the k-th largest bound (fewer than k sources reach
    it). The top sources sit at their bound (saturated), the rest below it: the k-th largest
    bound settles the choice with k priorities. Also with eligibility, and for a top where
    the bound is loose (the second pass). Always select_top's answer."""
    rng = np.random.default_rng(11)
    n, k = 5000, 50
    pruned = PrunedTop()
    asked = []

    def priority_of(ids):
        asked.append(ids.shape[0])
        return prio[ids]

    for t in range(60):
        bound = rng.lognormal(size=n) * (0.5 if t % 2 else 1.0)   # the top falls by half
        prio = bound * np.where(bound > np.quantile(bound, 0.97), 1.0, rng.uniform(0.1, 0.9, n))
        if t % 7 == 3:
            prio *= rng.uniform(0.2, 1.0, n)                        # loose at the top too
        eligible = rng.random(n) < 0.8 if t % 3 == 0 else None
        cut_before = pruned.cut
        asked.clear()
        got = pruned(bound, priority_of, k, eligible)
        want = select_top(prio, None, k, eligible)
        if cut_before is None:
            assert got is None                          # the first: computed in full
            pruned.settled(prio, want)
            continue
        np.testing.assert_array_equal(got, want)
        fell = t % 2 == 1
        if fell and t % 7 != 3:         # guess: the k-th bound, where the top sits: k priorities
            assert asked == [k], (t, cut_before, asked)
        assert sum(asked) < n / 4


def test_tight_pruned_top_guesses_the_kth_bound_where_the_cut_off_rose():
    """diurnal-whittle's steady state: the bounds of the sources near the top are nearly
    their priorities (tight), and the top rises by a few percent from one epoch to the next,
    so that many sources reach the lowered last cut-off. With ``tight``, once a decision
    showed the bounds tight, a little below the k-th largest bound of those is the guess:
    about 5k / 4 priorities and a second pass over the few sources between it and the k-th
    priority settle the choice, where the plain guess asks for many more. While the bounds
    at the top are loose (a crawl's start) that guess is far above the k-th priority: the
    passes widening to about twice as many sources each find it, asking no more than the
    plain guess. Always select_top's answer (eligibility too)."""
    rng = np.random.default_rng(12)
    n, k = 5000, 50
    asked = {False: [], True: []}
    pruners = {tight: PrunedTop(max_share=1.0, tight=tight) for tight in (False, True)}
    level = 1.0
    for t in range(60):
        level *= 1.04 if t % 5 else 0.9                   # rises, and now and then falls
        bound = level * rng.uniform(0.5, 1.0, n)
        top = bound > np.quantile(bound, 0.9)
        loose = t < 20
        prio = bound * np.where(top & ~loose, rng.uniform(0.99, 1.0, n),
                                rng.uniform(0.5, 1.0, n))
        eligible = rng.random(n) < 0.8 if t % 3 == 0 else None
        want = select_top(prio, None, k, eligible)
        for tight, pruned in pruners.items():
            seen = []

            def priority_of(ids, seen=seen, prio=prio):
                seen.append(ids.shape[0])
                return prio[ids]

            got = pruned(bound, priority_of, k, eligible)
            if got is None:
                assert t == 0                               # the first: computed in full
                pruned.settled(prio, want)
                continue
            np.testing.assert_array_equal(got, want)
            asked[tight].append(sum(seen))
    assert sum(asked[True][:20]) <= sum(asked[False][:20])  # loose: no more than the plain
    assert max(asked[True][20:]) < 5 * k
    assert sum(asked[True][20:]) < sum(asked[False][20:]) / 4


def test_pruned_top_leaves_degenerate_bounds_to_the_caller():
    """A cut-off above every bound, and then no bound above zero at the top, NaN bounds at
    the top, or fewer than k eligible: None (the caller computes every priority)."""
    n, k = 1000, 10
    pruned = PrunedTop()
    pruned.cut = 10.0                   # above every bound below: the k-th bound is tried

    def priority_of(ids):
        return np.zeros(ids.shape[0])

    assert pruned(np.zeros(n), priority_of, k) is None
    bound = np.linspace(1.0, 2.0, n)
    bound[:k] = np.nan
    assert pruned(bound, priority_of, k) is None
    few = np.zeros(n, dtype=bool)
    few[:k - 1] = True
    assert pruned(np.linspace(1.0, 2.0, n), priority_of, k, few) is None


def test_pruned_top_settles_when_the_sampled_bounds_all_lie_above_the_kth_priority():
    """Every eligible source's bound is far above its priority (a mask leaves only high
    bounds in the ladder's sample): a widened guess would be no lower than the pass's, so
    the M-th priority found is the next threshold, and the second pass decides. (It passed
    over the same sources up to N times, then left the choice to the caller.)"""
    n, k = 2000, 10
    rng = np.random.default_rng(13)
    bound = np.ones(n)
    prio = rng.uniform(0.0, 0.5, n)
    eligible = np.zeros(n, dtype=bool)
    eligible[:900] = True
    pruned = PrunedTop()
    pruned.cut = 0.9
    passes = []

    def priority_of(ids):
        passes.append(ids.shape[0])
        return prio[ids]

    got = pruned(bound, priority_of, k, eligible)
    np.testing.assert_array_equal(got, select_top(prio, None, k, eligible))
    assert passes == [900]

def capped_greedy(prio, host, caps, budget):
    """Reference: sources in decreasing priority (ties to the lower id), each taken while
    the budget and its host's cap allow (unit costs)."""
    left = caps.copy()
    out = []
    for i in sorted(range(prio.shape[0]), key=lambda i: (-prio[i], i)):
        if len(out) >= budget:
            break
        if left[host[i]] >= 1:
            left[host[i]] -= 1
            out.append(i)
    return sorted(out)


def test_host_caps_take_each_hosts_best_and_give_the_rest_to_other_hosts():
    from scrapy_whittle.core.selection import select_within_hosts

    rng = np.random.default_rng(3)
    for _ in range(20):
        n, n_hosts = 60, 5
        prio = rng.random(n)
        host = rng.integers(0, n_hosts, n)
        caps = rng.integers(0, 6, n_hosts).astype(float)
        caps[rng.random(n_hosts) < 0.3] = np.inf
        budget = float(rng.integers(1, 25))
        calls = []

        def select(b, eligible, prio=prio, calls=calls):
            calls.append(b)
            return select_top(prio, None, b, eligible)

        chosen = select_within_hosts(select, host, caps, budget)
        assert sorted(chosen.tolist()) == capped_greedy(prio, host, caps, budget)
        assert len(calls) <= n_hosts + 1


def test_host_caps_that_do_not_bind_ask_the_policy_once():
    from scrapy_whittle.core.selection import select_within_hosts

    prio = np.arange(10.0)
    host = np.arange(10) % 2
    calls = []

    def select(b, eligible):
        calls.append(b)
        return select_top(prio, None, b, eligible)

    chosen = select_within_hosts(select, host, np.array([5.0, np.inf]), 4)
    assert sorted(chosen.tolist()) == [6, 7, 8, 9] and len(calls) == 1
