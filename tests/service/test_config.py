"""The one table of WHITTLE_* settings (``scrapy_whittle.service.config.SETTINGS``) against
the dataclasses built from it, the docs' table of settings, and DOWNLOAD_SLOTS."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scrapy_whittle.service.clock import SimulatedClock
from scrapy_whittle.service.config import (
    DEFAULTS,
    REQUIRED,
    SETTING,
    SETTINGS,
    InvalidSetting,
    ParsingConfig,
    WhittleConfig,
    cluster_address,
    download_slot_delays,
)

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "scrapy.md"

#: a valid value other than the default, for every setting
OTHER = {
    "WHITTLE_SOURCES": ["http://a.example/x.xml"],
    "WHITTLE_SOURCES_REFRESH": 60,
    "WHITTLE_POLICY": "round_robin",
    "WHITTLE_POLICY_OPTIONS": {"prior_half_life": 7200.0},
    "WHITTLE_ORACLE_PARAMS": {"http://a.example/x.xml": {"rate": 1, "mean_utility": 1,
                                                         "decay": 0.1}},
    "WHITTLE_BUDGET": 2,
    "WHITTLE_PERIOD": 60,
    "WHITTLE_STEP": 600,
    "WHITTLE_SPREAD": True,
    "WHITTLE_DISCOVERY": True,
    "WHITTLE_SITE_SEARCH": False,
    "WHITTLE_SEED": 3,
    "WHITTLE_MIN_INTERVAL": 5,
    "WHITTLE_MAX_INTERVAL": 7200,
    "WHITTLE_HOST_LIMITS": {"a.example": 2},
    "WHITTLE_HOST_LATENCY_FACTOR": 3,
    "WHITTLE_BACKOFF_BASE": 30,
    "WHITTLE_BACKOFF_MAX": 3600,
    "WHITTLE_RETIRE_AFTER": 0,
    "WHITTLE_RETIRE_404_AFTER": 86400,
    "WHITTLE_RETIRE_PROBE": 3600,
    "WHITTLE_SITEMAP_CHILD_MISSES": 0,
    "WHITTLE_SITEMAP_CHILD_MAX_AGE": 86400,
    "WHITTLE_CONDITIONAL_GET": False,
    "WHITTLE_HINTS": False,
    "WHITTLE_HINTS_MAX_DELAY": 60,
    "WHITTLE_MAX_FEED_SIZE": 1000,
    "WHITTLE_MAX_ENTRIES_PER_SOURCE": 500,
    "WHITTLE_FEED_PARSER": "feedparser",
    "WHITTLE_PARSE_WORKERS": 0,
    "WHITTLE_PARSE_INLINE_MAX_BYTES": 1000,
    "WHITTLE_PARSE_TIMEOUT": 5,
    "WHITTLE_MAX_FEED_ENTRIES": 100,
    "WHITTLE_MAX_FIELD_LENGTH": 100,
    "WHITTLE_DEDUP": "entry",
    "WHITTLE_DEDUP_DROP_PARAMS": ["utm_*", "ref"],
    "WHITTLE_ARTICLES": True,
    "WHITTLE_ARTICLE_HOST_LIMIT": 30,
    "WHITTLE_ARTICLE_MAX_SIZE": 2**20,
    "WHITTLE_NEAR_DUPLICATES": 0.8,
    "WHITTLE_ENGAGEMENT_SCALE": 10,
    "WHITTLE_ITEM_VALUE": 2,
    "WHITTLE_LOGSTATS_INTERVAL": 0,
    "WHITTLE_STATE": False,
    "WHITTLE_CHECKPOINT_INTERVAL": 1,
    "WHITTLE_TRACE_DAYS": 7,
    "WHITTLE_MAX_EPOCHS": 3,
    "WHITTLE_CLOCK": SimulatedClock(),
    "WHITTLE_REDIS_URL": "redis://localhost:6379/0",
    "WHITTLE_REDIS_PREFIX": "x:{spider}",
    "WHITTLE_REDIS_LEASE": 30,
    "WHITTLE_REDIS_LOCK_TTL": 5,
    "WHITTLE_REDIS_BACKLOG": 10,
    "WHITTLE_REDIS_STANDBY": True,
    "WHITTLE_REDIS_WAIT": 2,
    "WHITTLE_HALF_LIFE": 600,
    "WHITTLE_WEBSUB_CALLBACK": "https://crawler.example/websub",
    "WHITTLE_WEBSUB_LISTEN": "127.0.0.1:8080",
    "WHITTLE_WEBSUB_LEASE": 3600,
    "WHITTLE_PROMETHEUS_PORT": 9410,
}


def shown(default) -> str:
    """A default as the docs' table shows it."""
    if default is REQUIRED:
        return "required"
    if isinstance(default, str):
        return f'`"{default}"`'
    return f"`{default!r}`"


def docs_rows() -> list[tuple[str, str, str]]:
    """(setting, default, meaning) of the table in docs/scrapy.md's "Settings" section."""
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if line.startswith("| `WHITTLE_"):
            name, default, meaning = (cell.strip() for cell in line.strip("|").split(" | ", 2))
            rows.append((name.strip("`"), default, meaning))
    return rows


def test_the_docs_table_is_the_code_table():
    expected = [(s.name, shown(s.default), s.doc) for s in SETTINGS]
    table = "\n".join(f"| `{n}` | {d} | {m} |" for n, d, m in expected)
    rows = docs_rows()
    assert [r[0] for r in rows] == [s.name for s in SETTINGS], table
    assert [r[1] for r in rows] == [e[1] for e in expected], table
    assert rows == expected, table


def test_defaults_as_users_get_them():
    assert len(SETTING) == len(SETTINGS)          # each setting once
    assert DEFAULTS["WHITTLE_MAX_ENTRIES_PER_SOURCE"] == 10_000
    assert DEFAULTS["WHITTLE_MAX_FEED_SIZE"] == 10 * 1024 * 1024
    assert DEFAULTS["WHITTLE_BUDGET"] is REQUIRED
    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": 1})
    assert config.max_entries_per_source == 10_000
    assert config.parsing.max_entries == 10_000 and config.parsing.max_bytes == 10 * 2**20
    assert (config.period, config.policy, config.core_policy) == (3600.0, "whittle", "whittle")
    assert WhittleConfig.from_settings({"WHITTLE_BUDGET": 1, "WHITTLE_POLICY":
                                        "adaptive-whittle"}).core_policy == "whittle"


def test_the_dataclass_defaults_are_the_tables():
    """A config built with only a budget equals the one read from settings that give only
    the budget: every field's default is what its setting's default reads as."""
    assert WhittleConfig.from_settings({"WHITTLE_BUDGET": 1}) == WhittleConfig(budget=1.0)
    assert WhittleConfig(budget=1.0).parsing == ParsingConfig()
    for s in SETTINGS:
        if s.default is not REQUIRED:
            assert s.read({}) == s.default, s.name
    with pytest.raises(TypeError):
        WhittleConfig()                           # a budget is required, as in the settings
    with pytest.raises(InvalidSetting, match=r"WHITTLE_BUDGET \(None\) must be set"):
        WhittleConfig.from_settings({})

#: settings given only together (their companion, at another value than its default)
TOGETHER = {"WHITTLE_WEBSUB_CALLBACK": {"WHITTLE_WEBSUB_LISTEN": "0.0.0.0:9"},
            "WHITTLE_WEBSUB_LISTEN": {"WHITTLE_WEBSUB_CALLBACK": "https://other.example/cb"}}


def other_value(name: str) -> str:
    return {"WHITTLE_WEBSUB_CALLBACK": "https://b.example/cb",
            "WHITTLE_WEBSUB_LISTEN": "127.0.0.1:7"}[name]


def test_every_setting_is_read_into_the_config():
    """No orphan setting: a value other than the default changes the config."""
    assert set(OTHER) == set(SETTING)
    base = WhittleConfig.from_settings({"WHITTLE_BUDGET": 1})
    for name, value in OTHER.items():
        settings = {"WHITTLE_BUDGET": 1, name: value}
        assert WhittleConfig.from_settings({**settings, **TOGETHER.get(name, {})}) != base, name
    # a setting of a pair is read itself: another value of it, the companion kept, changes it
    for name, other in TOGETHER.items():
        one, two = ({"WHITTLE_BUDGET": 1, name: value, **other}
                    for value in (OTHER[name], other_value(name)))
        assert WhittleConfig.from_settings(one) != WhittleConfig.from_settings(two), name


def test_redis_url_falls_back_to_the_shared_setting():
    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": 1, "REDIS_URL": "redis://h/1"})
    assert config.redis_url == "redis://h/1"
    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": 1, "REDIS_URL": "redis://h/1",
                                          "WHITTLE_REDIS_URL": "redis://own/2"})
    assert config.redis_url == "redis://own/2"


def test_a_redis_cluster_url_is_read_and_a_broken_one_refused_by_name():
    url = "redis+cluster://user:secret@10.0.0.1:7000,10.0.0.2:7001/0"
    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": 1, "WHITTLE_REDIS_URL": url})
    assert config.redis_url == url
    assert cluster_address(url) == (
        [("10.0.0.1", 7000), ("10.0.0.2", 7001)], "user", "secret", False)
    assert cluster_address("rediss+cluster://h:1").ssl
    for bad, why in (("redis+cluster://u:secret@h:7000/3", "database 0 only"),
                     ("redis+cluster://h:7000,h2", "'h2' is not host:port"),
                     ("redis+cluster://h:99999", "'h:99999' is not host:port")):
        with pytest.raises(InvalidSetting) as err:
            WhittleConfig.from_settings({"WHITTLE_BUDGET": 1, "WHITTLE_REDIS_URL": bad})
        assert str(err.value).startswith("WHITTLE_REDIS_URL (")
        assert why in str(err.value) and "secret" not in str(err.value)


def test_download_slot_delays_follow_scrapy():
    """A slot without a delay waits DOWNLOAD_DELAY, as in Scrapy's downloader: left out."""
    slots = {"a.example": {"delay": 2}, "b.example": {"concurrency": 1},
             "c.example": {"delay": "0.5"}}
    assert download_slot_delays({"DOWNLOAD_SLOTS": slots}) == {"a.example": 2.0,
                                                                "c.example": 0.5}
    assert download_slot_delays({"DOWNLOAD_SLOTS": '{"a.example": {"delay": 3}}'}) == {
        "a.example": 3.0}
    assert download_slot_delays({}) == {}
    with pytest.raises(InvalidSetting, match=r"DOWNLOAD_SLOTS\['a.example'\]\['delay'\] "
                                             r"\(-1\) must be >= 0"):
        download_slot_delays({"DOWNLOAD_SLOTS": {"a.example": {"delay": -1}}})


def test_download_slot_delays_from_scrapy_settings():
    from scrapy.settings import Settings

    settings = Settings({"DOWNLOAD_SLOTS": {"a.example": {"delay": 1.5}, "b.example": {}}})
    assert download_slot_delays(settings) == {"a.example": 1.5}


def test_config_and_sources_import_each_other_not():
    """sources raises InvalidSetting without importing config (which imports sources)."""
    code = ("import sys, scrapy_whittle.service.sources.registry; "
            "print('scrapy_whittle.service.config' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "False"
    import scrapy_whittle
    from scrapy_whittle.service.sources import registry as sources

    assert scrapy_whittle.InvalidSetting is InvalidSetting is sources.InvalidSetting


def test_an_unknown_whittle_name_is_refused_with_the_closest_known_one():
    """Scrapy keeps any setting it is given: a misspelt WHITTLE_* name would change nothing
    without a word. Every unknown one is named, with its value and the nearest known name."""
    with pytest.raises(InvalidSetting) as info:
        WhittleConfig.from_settings({"WHITTLE_BUDGET": 1, "WHITTLE_BUDGTE": "3",
                                     "WHITTLE_SOURCE": "feeds.opml", "WHITTLE_XYZZY": 1})
    message = str(info.value)
    assert "WHITTLE_BUDGTE ('3') is not a scrapy-whittle setting: did you mean " \
           "WHITTLE_BUDGET?" in message
    assert "WHITTLE_SOURCE ('feeds.opml') is not a scrapy-whittle setting: did you mean " \
           "WHITTLE_SOURCES?" in message
    # the shared prefix alone makes no suggestion
    assert "WHITTLE_XYZZY (1) is not a scrapy-whittle setting: no setting has a name close " \
           "to it" in message
    # names outside the prefix are Scrapy's or another plugin's
    WhittleConfig.from_settings({"WHITTLE_BUDGET": 1, "BUDGTE": 3, "REDIS_URL": None})


def test_host_limits_are_a_dict_or_its_json_text_of_positive_crawls_per_epoch():
    read = SETTING["WHITTLE_HOST_LIMITS"].read
    assert read({}) is None and read({"WHITTLE_HOST_LIMITS": ""}) is None
    assert read({"WHITTLE_HOST_LIMITS": {"A.example": 2, "b.example": "0.5"}}) == {
        "a.example": 2.0, "b.example": 0.5}
    assert read({"WHITTLE_HOST_LIMITS": '{"a.example": 3}'}) == {"a.example": 3.0}
    for bad, message in [({"a.example": 0}, r"WHITTLE_HOST_LIMITS\['a.example'\] \(0\) must"),
                         ({"a.example": "many"}, r"\('many'\) must be a number of crawls"),
                         ({"a.example": float("inf")}, r"\(inf\) must be"),
                         ({"a.example": True}, r"\(True\) must be"),
                         ([1, 2], r"WHITTLE_HOST_LIMITS \(\[1, 2\]\) must be a dict"),
                         ('{"a.example": ', r"WHITTLE_HOST_LIMITS .* is not valid JSON")]:
        with pytest.raises(InvalidSetting, match=message):
            WhittleConfig.from_settings({"WHITTLE_BUDGET": 1, "WHITTLE_HOST_LIMITS": bad})


def test_the_maximum_interval_reaches_the_index_policies_only():
    from scrapy_whittle.core.problem import Problem
    from scrapy_whittle.service.policy_options import build_policy

    def built(**settings):
        config = WhittleConfig.from_settings({"WHITTLE_BUDGET": 1, **settings})
        return build_policy(config, Problem(n=2, period=config.period))

    assert built().max_interval == 24 * 3600.0            # a day of the default periods
    assert built(WHITTLE_PERIOD=1).max_interval == 24.0     # (a simulated day: sim.serve)
    # a day the budget cannot keep: eight rounds of every source instead (two sources, a
    # crawl a period: 16 periods; a tenth of a crawl: 160)
    assert built(WHITTLE_BUDGET=0.1).max_interval == 160 * 3600.0
    assert built(WHITTLE_BUDGET=0.1, WHITTLE_MAX_INTERVAL=60).max_interval == 60.0   # as set
    assert built(WHITTLE_MAX_INTERVAL=7200).max_interval == 7200.0
    assert built(WHITTLE_MAX_INTERVAL=0).max_interval is None
    assert built(WHITTLE_POLICY_OPTIONS={"max_interval": 60.0}).max_interval == 60.0
    assert not hasattr(built(WHITTLE_POLICY="round_robin"), "max_interval")
