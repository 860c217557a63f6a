"""The service gives the learned policies the pooling groups of their population prior from the
source list: the OPML category where given, else the host."""

from __future__ import annotations

import numpy as np

from scrapy_whittle.service.clock import SimulatedClock
from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.recrawl import RecrawlService
from scrapy_whittle.service.sources.registry import SourceSpec
from scrapy_whittle.service.state.store import FILE_NAME, SqliteStateStore

LIST = [SourceSpec(url="https://a.example/politics.xml", category="politics"),
        SourceSpec(url="https://b.example/sport.xml", category="sport"),
        SourceSpec(url="https://c.example/politics.xml", category="politics"),
        SourceSpec(url="https://a.example/misc.xml"),
        SourceSpec(url="https://d.example/sport.xml", category="sport"),
        SourceSpec(url="https://a.example/other.xml"),
        SourceSpec(url="https://e.example/feed.xml")]


def open_service(policy="whittle", store=None, **settings):
    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": 2, "WHITTLE_POLICY": policy,
                                          **settings})
    service = RecrawlService(config, clock=SimulatedClock(start=1e9), store=store)
    service.open(LIST)
    return service


def test_two_categories_of_feeds_are_two_groups_and_the_rest_pool_by_host():
    service = open_service()
    # politics, sport, host a.example, host e.example: numbered as they first appear
    assert service.policy.group.tolist() == [0, 1, 0, 2, 1, 2, 3]
    service.add_sources([SourceSpec(url="https://a.example/new.xml"),
                         SourceSpec(url="https://z.example/new.xml", category="sport"),
                         SourceSpec(url="https://y.example/new.xml")])
    service.keeper.grow()                      # as before the next selection
    assert service.policy.group[7:].tolist() == [2, 1, 4]


def test_the_groups_survive_a_restart(tmp_path):
    service = open_service(store=SqliteStateStore(tmp_path / FILE_NAME))
    service.checkpoint()
    restored = open_service(store=SqliteStateStore(tmp_path / FILE_NAME))
    assert restored.policy.group.tolist() == [0, 1, 0, 2, 1, 2, 3]


def test_the_diurnal_learner_pools_its_rhythms_by_the_same_groups():
    service = open_service("diurnal-whittle")
    assert service.policy.profile.group.tolist() == [0, 1, 0, 2, 1, 2, 3]


def test_groups_given_in_the_policy_options_win():
    given = [5, 5, 5, 5, 1, 1, 1]
    service = open_service(WHITTLE_POLICY_OPTIONS={"groups": given})
    assert service.policy.group.tolist() == given


def test_a_policy_without_groups_is_built_without():
    service = open_service("round_robin")
    assert not hasattr(service.policy, "groups")
    np.testing.assert_array_equal(service.sources.group_of(np.arange(7)), [0, 1, 0, 2, 1, 2, 3])
