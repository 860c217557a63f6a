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


def test_the_version_is_the_installed_distributions_as_pyproject_gives_it():
    import tomllib
    from pathlib import Path

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    version = tomllib.loads(pyproject.read_text())["project"]["version"]
    assert scrapy_whittle.__version__ == version


@pytest.mark.parametrize("installed", ["9.8.7", None])
def test_the_version_is_read_from_the_installed_metadata(monkeypatch, installed):
    import importlib
    from importlib import metadata

    def version(name):
        assert name == "scrapy-whittle"
        if installed is None:
            raise metadata.PackageNotFoundError(name)
        return installed

    monkeypatch.setattr(metadata, "version", version)
    try:
        assert importlib.reload(scrapy_whittle).__version__ == (installed or "0+unknown")
    finally:
        monkeypatch.undo()
        importlib.reload(scrapy_whittle)
