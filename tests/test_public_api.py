"""The names users and the docs import from the top of the package, and the dotted paths a
Scrapy project writes into its settings, resolve to the components they name."""

from __future__ import annotations

import pytest
from scrapy.utils.misc import load_object

import scrapy_whittle


@pytest.mark.parametrize("name", scrapy_whittle.__all__)
def test_every_public_name_resolves(name):
    assert getattr(scrapy_whittle, name) is not None


def test_the_settings_paths_of_a_project_load_the_components():
    from scrapy_whittle.scrapy.addon import Addon
    from scrapy_whittle.scrapy.delivery import DeliveryMiddleware
    from scrapy_whittle.scrapy.middleware import FeedObserverMiddleware, RetryAfterMiddleware
    from scrapy_whittle.scrapy.scheduler import WhittleScheduler

    assert load_object("scrapy_whittle.Addon") is Addon
    assert load_object("scrapy_whittle.WhittleScheduler") is WhittleScheduler
    assert load_object("scrapy_whittle.FeedObserverMiddleware") is FeedObserverMiddleware
    assert load_object("scrapy_whittle.RetryAfterMiddleware") is RetryAfterMiddleware
    assert load_object("scrapy_whittle.DeliveryMiddleware") is DeliveryMiddleware


def test_the_public_exception_and_clock_are_the_services():
    from scrapy_whittle.service.clock import SimulatedClock
    from scrapy_whittle.service.config import InvalidSetting

    assert scrapy_whittle.InvalidSetting is InvalidSetting
    assert issubclass(scrapy_whittle.InvalidSetting, ValueError)
    assert scrapy_whittle.SimulatedClock is SimulatedClock


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        scrapy_whittle.Nope  # noqa: B018
