"""``sim.serve --kinds mix --index-rotate T``: the sitemap index lists half its children at a
time, the other half every T scenario time units, with an ETag per listing."""

from __future__ import annotations

import re

import pytest

from sim.web.kinds import SourceKinds


def test_the_index_lists_each_half_of_its_children_in_turn():
    kinds = SourceKinds(32, "mix", rotate=6.0)
    children = [i for i in range(32) if kinds.indexed(i)]
    assert children == [7, 15, 23, 31]
    first, second = kinds.listed_children(0.0), kinds.listed_children(6.0)
    assert first == [7, 23] and second == [15, 31]
    assert kinds.listed_children(5.9) == first and kinds.listed_children(12.0) == first
    body = kinds.index("http://h", 7.0).decode()
    assert re.findall(r"<loc>([^<]*)</loc>", body) == ["http://h/sitemap/15.xml.gz",
                                                       "http://h/sitemap/31.xml.gz"]
    assert SourceKinds(32, "mix").listed_children(7.0) == children        # no rotation


def test_a_negative_rotation_is_refused():
    with pytest.raises(ValueError, match="rotation"):
        SourceKinds(8, "mix", rotate=-1.0)
