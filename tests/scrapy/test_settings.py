import pytest
import pytest_twisted

from scrapy_whittle.scrapy.middleware import FeedObserverMiddleware
from scrapy_whittle.scrapy.scheduler import WhittleScheduler
from scrapy_whittle.service.config import InvalidSetting, WhittleConfig
from tests.scrapy.conftest import make_crawler

GOOD = {"WHITTLE_BUDGET": 2, "WHITTLE_POLICY": "round_robin",
        "WHITTLE_SOURCES": ["http://127.0.0.1:1/a.xml"]}


@pytest.mark.parametrize(("name", "value", "fragment"), [
    ("WHITTLE_BUDGET", None, "must be set"),
    ("WHITTLE_BUDGET", 0, "must be > 0"),
    ("WHITTLE_BUDGET", "lots", "must be a number"),
    ("WHITTLE_PERIOD", -1, "must be > 0"),
    ("WHITTLE_PERIOD", float("inf"), "must be finite"),
    ("WHITTLE_POLICY", "nonesuch", "must be one of: 'whittle'"),
    ("WHITTLE_POLICY_OPTIONS", {"nonesuch": 1}, "has no option 'nonesuch'"),
    ("WHITTLE_POLICY", "oracle", "WHITTLE_ORACLE_PARAMS"),
    ("WHITTLE_POLICY_OPTIONS", [1], "must be a dict"),
    ("WHITTLE_POLICY_OPTIONS", '{"batch": ', "is not valid JSON"),
    ("WHITTLE_SPREAD", "maybe", "must be a boolean"),
    ("WHITTLE_SEED", 1.5, "must be an integer"),
    ("WHITTLE_MIN_INTERVAL", -3, "must be >= 0"),
    ("WHITTLE_MAX_INTERVAL", -3, "must be >= 0"),
    ("WHITTLE_MAX_INTERVAL", "a day", "must be a number"),
    ("WHITTLE_BACKOFF_MAX", 1, "must be >= WHITTLE_BACKOFF_BASE"),
    ("WHITTLE_CONDITIONAL_GET", 7, "must be a boolean"),
    ("WHITTLE_MAX_FEED_SIZE", 0, "must be > 0"),
    ("WHITTLE_MAX_ENTRIES_PER_SOURCE", 0, "must be >= 1"),
    ("WHITTLE_ENGAGEMENT_SCALE", 0, "must be > 0"),
    ("WHITTLE_ITEM_VALUE", -1, "must be >= 0"),
    ("WHITTLE_LOGSTATS_INTERVAL", -1, "must be >= 0"),
    ("WHITTLE_STATE", "x", "must be a boolean"),
    ("WHITTLE_SOURCES", 42, "must be a file name"),
    ("WHITTLE_SOURCES", "/nonexistent/feeds.opml", "cannot read"),
    ("WHITTLE_SOURCES", ["ftp://x/y"], "not an http(s) URL"),
])
def test_bad_setting_names_setting_and_value(name, value, fragment):
    crawler = make_crawler(**{**GOOD, name: value})
    with pytest.raises(InvalidSetting) as info:
        WhittleScheduler.from_crawler(crawler)
    message = str(info.value)
    assert name in message and repr(value) in message and fragment in message


def test_oracle_params_are_validated(tmp_path):
    bad = tmp_path / "p.json"
    bad.write_text('{"sources": [{"url": "http://127.0.0.1:1/a.xml", "rate": -1, '
                   '"mean_utility": 1, "decay": 0.1}]}')
    crawler = make_crawler(**{**GOOD, "WHITTLE_POLICY": "oracle",
                              "WHITTLE_ORACLE_PARAMS": str(bad)})
    with pytest.raises(InvalidSetting, match="WHITTLE_ORACLE_PARAMS"):
        WhittleScheduler.from_crawler(crawler)


def test_dict_settings_from_the_command_line_are_json():
    """``scrapy crawl -s`` gives every value as a string: a dict setting is read as JSON, as
    Scrapy's ``getdict`` does."""
    config = WhittleConfig.from_settings({**GOOD, "WHITTLE_POLICY": "thompson",
                                          "WHITTLE_POLICY_OPTIONS": '{"weight": "reward"}',
                                          "WHITTLE_HALF_LIFE": '{"*": 7200, "news": "600"}'})
    assert config.policy_options == {"weight": "reward"}
    assert config.half_life == {"*": 7200.0, "news": 600.0}
    with pytest.raises(InvalidSetting, match=r"WHITTLE_HALF_LIFE\['\*'\] \(0\) must be"):
        WhittleConfig.from_settings({**GOOD, "WHITTLE_HALF_LIFE": '{"*": 0}'})


def test_a_policy_option_value_the_policy_refuses_stops_the_start():
    """Option names are checked against the constructor; their values by building the policy
    once at start-up (one line and exit status 1 from ``scrapy crawl``, not a traceback when
    the scheduler opens). From the command line, as JSON text."""
    crawler = make_crawler(**{**GOOD, "WHITTLE_POLICY": "thompson",
                              "WHITTLE_POLICY_OPTIONS": '{"weight": "bogus"}'})
    with pytest.raises(InvalidSetting) as info:
        WhittleScheduler.from_crawler(crawler)
    assert str(info.value) == ("WHITTLE_POLICY_OPTIONS ({'weight': 'bogus'}) for policy "
                               "'thompson': weight ('bogus') must be 'none' or 'reward'")


def test_options_with_a_value_per_source_are_left_to_the_build_at_open():
    """A prior half-life per source (one value per source id): built for one source at
    start-up it would not fit, so it is checked when the scheduler builds the policy."""
    urls = [f"http://127.0.0.1:1/{i}.xml" for i in range(6)]
    options = {"prior_half_life": [3600.0] * 6}
    crawler = make_crawler(**{**GOOD, "WHITTLE_SOURCES": urls, "WHITTLE_POLICY": "whittle",
                              "WHITTLE_POLICY_OPTIONS": options})
    sched = WhittleScheduler.from_crawler(crawler)
    assert sched.config.policy_options == options


def test_good_settings_and_defaults():
    crawler = make_crawler(**GOOD)
    sched = WhittleScheduler.from_crawler(crawler)
    assert sched.config.period == 3600.0 and sched.config.budget == 2.0
    assert sched.service.config is sched.config
    assert WhittleConfig.from_settings({"WHITTLE_BUDGET": "3"}).core_policy == "whittle"
    assert WhittleConfig.from_settings({"WHITTLE_BUDGET": 1, "WHITTLE_SPREAD": "true"}).spread
    assert isinstance(FeedObserverMiddleware.from_crawler(crawler), FeedObserverMiddleware)


def test_public_names():
    import scrapy_whittle

    assert scrapy_whittle.WhittleScheduler is WhittleScheduler
    assert scrapy_whittle.FeedObserverMiddleware is FeedObserverMiddleware
    from scrapy_whittle.scrapy.addon import Addon

    assert scrapy_whittle.Addon is Addon


def test_bad_settings_stop_the_crawl_before_it_starts():
    # the middleware is built with the engine, before the spider opens
    crawler = make_crawler(**{**GOOD, "WHITTLE_BUDGET": -1})
    with pytest.raises(InvalidSetting, match=r"WHITTLE_BUDGET \(-1\) must be > 0"):
        FeedObserverMiddleware.from_crawler(crawler)


def test_the_addon_gives_the_tables_defaults_and_the_project_wins():
    from scrapy.settings import SETTINGS_PRIORITIES
    from scrapy.utils.test import get_crawler

    from scrapy_whittle.scrapy.addon import Addon
    from scrapy_whittle.scrapy.spiders import FeedSpider
    from scrapy_whittle.service.config import REQUIRED, SETTING, SETTINGS

    given = {**GOOD, "WHITTLE_PERIOD": 60, "WHITTLE_POLICY_OPTIONS": {}}
    crawler = get_crawler(FeedSpider, {"ADDONS": {Addon: 0}, **given})
    settings = crawler.settings
    assert settings.getfloat("WHITTLE_PERIOD") == 60.0              # the project's own
    assert settings.getint("WHITTLE_MAX_ENTRIES_PER_SOURCE") == 10_000
    assert settings.getint("WHITTLE_MAX_FEED_SIZE") == 10 * 1024 * 1024
    assert settings.getpriority("WHITTLE_PARSE_TIMEOUT") == SETTINGS_PRIORITIES["addon"]
    for setting in SETTINGS:
        if setting.name not in given and setting.default is not REQUIRED:
            assert settings[setting.name] == setting.default, setting.name
    # a default the add-on handed out is a copy: the table's own stays as it is
    handed_out = get_crawler(FeedSpider, {"ADDONS": {Addon: 0}, **GOOD}).settings
    handed_out["WHITTLE_POLICY_OPTIONS"]["x"] = 1
    assert SETTING["WHITTLE_POLICY_OPTIONS"].default == {}


def test_a_policy_whose_package_is_missing_names_the_extra_to_install(monkeypatch, caplog):
    """dqn without torch: one ERROR line at start-up naming the pip command, not an
    ImportError when the scheduler builds the policy. (torch is installed here: the look-up
    is made to find nothing.)"""
    import importlib.util
    import logging

    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name == "torch" else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    crawler = make_crawler(**{**GOOD, "WHITTLE_POLICY": "dqn"})
    with caplog.at_level(logging.ERROR), pytest.raises(InvalidSetting) as info:
        FeedObserverMiddleware.from_crawler(crawler)
    assert str(info.value) == ("WHITTLE_POLICY ('dqn') needs the package 'torch', which is "
                               "not installed: pip install 'scrapy-whittle[dqn]'")
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert str(info.value) in line
    # another policy does not need it
    assert WhittleConfig.from_settings({**GOOD, "WHITTLE_POLICY": "thompson"})


def test_require_extra_names_the_setting_the_value_and_the_extra():
    from scrapy_whittle.service.config import require_extra

    require_extra("numpy", "core", "WHITTLE_X", 1)          # installed: nothing to say
    with pytest.raises(InvalidSetting, match=r"^WHITTLE_X \('v'\) needs the package "
                                             r"'no_such_module_here', which is not installed: "
                                             r"pip install 'scrapy-whittle\[extra\]'$"):
        require_extra("no_such_module_here", "extra", "WHITTLE_X", "v")


def test_options_with_a_value_per_source_must_fit_the_sources_at_start():
    """One value per source: built at start-up for the sources the list gives, so a list of
    the wrong length stops the crawl before the spider opens instead of in a traceback when
    the scheduler builds the policy."""
    urls = [f"http://127.0.0.1:1/{i}.xml" for i in range(3)]
    options = {"prior_half_life": [3600.0] * 6}
    crawler = make_crawler(**{**GOOD, "WHITTLE_SOURCES": urls, "WHITTLE_POLICY": "whittle",
                              "WHITTLE_POLICY_OPTIONS": options})
    with pytest.raises(InvalidSetting) as info:
        FeedObserverMiddleware.from_crawler(crawler)
    assert str(info.value) == (f"WHITTLE_POLICY_OPTIONS ({options!r}) for policy 'whittle': "
                               "prior_half_life must have one value per source id (3), got "
                               "(6,)")


@pytest_twisted.ensureDeferred
async def test_a_policy_the_jobdirs_sources_make_unbuildable_is_logged_first(tmp_path, caplog):
    """A JOBDIR may hold more sources than the list (sources that left it keep their state):
    the policy is built for them all when the scheduler opens, and a refusal then is logged
    first, as the start-up check's ERROR line, and the crawl does not start. (Scrapy then
    reports the spider it could not open, closing it, in lines of its own.)"""
    import logging

    from scrapy_whittle.service.clock import SimulatedClock
    from tests.scrapy.conftest import START, run

    urls = [f"http://127.0.0.1:1/{i}.xml" for i in range(8)]
    settings = {**GOOD, "JOBDIR": str(tmp_path / "job"), "WHITTLE_MAX_EPOCHS": 1,
                "WHITTLE_PERIOD": 60, "WHITTLE_SOURCES": urls}
    await run(make_crawler(**settings, WHITTLE_CLOCK=SimulatedClock(start=START, speed=0.0)))
    options = {"prior_half_life": [3600.0] * 6}
    crawler = make_crawler(**{**settings, "WHITTLE_SOURCES": urls[:6],
                              "WHITTLE_POLICY": "whittle", "WHITTLE_POLICY_OPTIONS": options,
                              "WHITTLE_CLOCK": SimulatedClock(start=START, speed=0.0)})
    caplog.clear()
    with caplog.at_level(logging.ERROR), pytest.raises(InvalidSetting) as info:
        await run(crawler)
    assert info.value.reported
    line = next(r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)
    assert line == f"the crawl cannot start: {info.value}"
    assert "prior_half_life must have one value per source id (8), got (6,)" in line
    assert crawler.stats.get_value("whittle/crawls") is None
