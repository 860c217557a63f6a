"""Spidermon monitors of a re-crawl, from its ``whittle/*`` stats (docs/deploy.md).

On with Spidermon installed (the ``monitoring`` extra) and, in the project's settings::

    SPIDERMON_ENABLED = True
    EXTENSIONS = {"spidermon.contrib.scrapy.extensions.Spidermon": 500}
    SPIDERMON_SPIDER_CLOSE_MONITORS = ["news_crawler.monitors.WhittleMonitorSuite"]

(``SPIDERMON_PERIODIC_MONITORS = {"news_crawler.monitors.WhittleMonitorSuite": 600}`` runs
them every ten minutes of a crawl that never ends instead.) The thresholds are settings:

* ``SPIDERMON_WHITTLE_MIN_NEW_ITEMS`` (1): new stories the crawl must have found;
* ``SPIDERMON_WHITTLE_MIN_BUDGET_USED`` (0.5): share of the budget spent over the completed
  epochs (``whittle/budget_used``, written when the crawl closes; a crawl closed before its
  first epoch ended has none, and the monitor is skipped): below it, the crawl is starved
  (slow hosts, a too small ``CONCURRENT_REQUESTS``, sources in back-off);
* ``SPIDERMON_WHITTLE_MAX_ERROR_SHARE`` (0.1): errors (``whittle/errors/*``) per crawl.

The suite counts its outcome in the crawl's stats (``spidermon/whittle/passed`` or
``spidermon/whittle/failed``), where Scrapyd's and Scrapy Cloud's stats pages show it; a
project adds Spidermon's own actions (e-mail, Slack, Sentry) to ``monitors_failed_actions``.
"""

from __future__ import annotations

from spidermon import Monitor, MonitorSuite, monitors
from spidermon.contrib.monitors.mixins import StatsMonitorMixin
from spidermon.core.actions import Action


@monitors.name("Whittle re-crawl")
class WhittleMonitor(Monitor, StatsMonitorMixin):
    def setting(self, name: str, default: float) -> float:
        return self.data.crawler.settings.getfloat(name, default)

    @monitors.name("new stories found")
    def test_new_stories(self):
        least = self.setting("SPIDERMON_WHITTLE_MIN_NEW_ITEMS", 1)
        found = self.stats.get("whittle/new_items", 0)
        self.assertGreaterEqual(found, least, msg=f"{found} new stories, fewer than {least:g}")

    @monitors.name("budget used")
    def test_budget_used(self):
        used = self.stats.get("whittle/budget_used")
        if used is None:
            self.skipTest("no epoch completed: the budget used is not measured yet")
        floor = self.setting("SPIDERMON_WHITTLE_MIN_BUDGET_USED", 0.5)
        self.assertGreaterEqual(used, floor,
                                msg=f"budget used {used:.1%}, below the floor {floor:.0%}")

    @monitors.name("errors per crawl")
    def test_errors(self):
        ceiling = self.setting("SPIDERMON_WHITTLE_MAX_ERROR_SHARE", 0.1)
        errors = sum(v for k, v in self.stats.items() if k.startswith("whittle/errors/"))
        crawls = self.stats.get("whittle/crawls", 0)
        share = errors / crawls if crawls else 0.0
        self.assertLessEqual(share, ceiling, msg=f"{errors} errors in {crawls} crawls: "
                             f"{share:.1%}, above the ceiling {ceiling:.0%}")


class CountOutcome(Action):
    """``spidermon/whittle/passed`` or ``spidermon/whittle/failed`` += 1 in the crawl's stats."""

    def run_action(self):
        outcome = "failed" if self.monitors_failed else "passed"
        self.data.crawler.stats.inc_value(f"spidermon/whittle/{outcome}")


class WhittleMonitorSuite(MonitorSuite):
    monitors = [WhittleMonitor]
    monitors_finished_actions = [CountOutcome]
