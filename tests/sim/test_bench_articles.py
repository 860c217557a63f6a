"""sim.bench.articles' measure of extraction quality: shingle-level F1."""

from __future__ import annotations

import pytest

from sim.bench.articles import f1, shingles


def test_f1_of_shingles():
    text = "one two three four five six"
    assert shingles(text) == {("one", "two", "three"), ("two", "three", "four"),
                              ("three", "four", "five"), ("four", "five", "six")}
    assert f1(text, text) == 1.0
    assert f1("nothing alike here", text) == 0.0
    half = "one two three four"               # 2 of 4 shingles, all of them right
    assert f1(half, text) == pytest.approx(2 * 1.0 * 0.5 / 1.5)
    assert f1(text + " Advertisement buy now", text) < 1.0
