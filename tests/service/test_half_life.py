"""WHITTLE_HALF_LIFE: the prior of interest decay, per source or category."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scrapy_whittle.service.config import InvalidSetting, WhittleConfig
from scrapy_whittle.service.recrawl import RecrawlService
from scrapy_whittle.service.sources.registry import parse_opml

OPML = b"""<?xml version="1.0"?>
<opml version="2.0"><body>
  <outline text="Sports">
    <outline text="Scores" xmlUrl="https://a.example/scores.xml"/>
    <outline text="Transfers" xmlUrl="https://a.example/transfers.xml" category="/Gossip"/>
  </outline>
  <outline text="Science weekly" xmlUrl="https://b.example/science.xml"/>
</body></opml>"""


def test_opml_categories_from_attribute_or_folder():
    specs = parse_opml(OPML)
    assert [s.category for s in specs] == ["Sports", "Gossip", ""]


@pytest.mark.parametrize("value", [0, -5, "soon", float("inf"), True, {"Sports": 0},
                                   {"Sports": "x"}])
def test_bad_half_life_names_the_setting_and_value(value):
    with pytest.raises(InvalidSetting, match=r"WHITTLE_HALF_LIFE"):
        WhittleConfig.from_settings({"WHITTLE_BUDGET": 1, "WHITTLE_HALF_LIFE": value})


def _service(half_life):
    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": 1, "WHITTLE_PERIOD": 600,
                                          "WHITTLE_HALF_LIFE": half_life})
    service = RecrawlService(config)
    service.open(parse_opml(OPML))
    return service


def test_prior_by_url_then_category_then_star_then_policy_default():
    service = _service({"https://a.example/scores.xml": 1800, "Gossip": 7200, "*": 86400})
    np.testing.assert_array_equal(service.sources.half_life[:3], [1800, 7200, 86400])
    service = _service({"Sports": 3600})
    h = service.sources.half_life[:3]
    assert h[0] == 3600 and np.isnan(h[1]) and np.isnan(h[2])   # unconfigured: the policy's
    assert service.policy.decay.mu0[1] == pytest.approx(math.log(2) / (4 * 600))  # 4 epochs
    assert np.all(np.isnan(_service(None).sources.half_life[:3]))
    assert _service(5000).sources.half_life[2] == 5000


def test_the_adaptive_policy_starts_from_the_configured_prior():
    service = _service({"Sports": 3600, "*": 86400})
    mu0 = service.policy.decay.mu0
    np.testing.assert_allclose(mu0, math.log(2) / np.array([3600, 86400, 86400]))
