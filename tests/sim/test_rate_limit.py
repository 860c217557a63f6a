"""sim.web.rate_limit: the host of ``sim.serve --rate-limit`` that answers 429 above a rate."""

from __future__ import annotations

import pytest

from sim.web.rate_limit import RateLimit, parse_rate_limit


def test_a_sliding_minute_of_answered_requests():
    limit = RateLimit(feeds=3, per_minute=2)
    assert [limit.admit(0, t) for t in (0.0, 1.0, 2.0, 59.9, 60.0, 61.0, 61.5)] == [
        True, True, False, False, True, True, False]
    # refusals do not count against the window; every request is logged
    assert [s for _, _, s in limit.log] == [200, 200, 429, 429, 200, 200, 429]
    assert limit.covers(2) and not limit.covers(3)
    assert limit.headers() == {}
    assert RateLimit(1, 1, 60.0).headers() == {"retry-after": "60"}


def test_parse_rate_limit():
    assert parse_rate_limit("") is None
    limit = parse_rate_limit("50:1:30")
    assert (limit.feeds, limit.per_minute, limit.retry_after) == (50, 1, 30.0)
    assert parse_rate_limit("50:1").retry_after is None
    for bad in ("50", "a:1", "0:1", "5:0", "5:1:-1", "1:2:3:4"):
        with pytest.raises(ValueError, match="rate"):
            parse_rate_limit(bad)
