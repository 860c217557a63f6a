"""``InvalidSetting``, the one exception of bad configuration.

In a module of its own so that everything that reads a setting (the settings table in
:mod:`scrapy_whittle.service.config`, the source list reader in
:mod:`scrapy_whittle.service.sources.registry`) can raise it without importing the other.
"""

from __future__ import annotations


class InvalidSetting(ValueError):
    """A ``WHITTLE_*`` setting (or the sources file it names) cannot be used. The message
    names the setting, its value and what is allowed. (Not Scrapy's ``NotConfigured``, which
    would merely disable a middleware and let the crawl run without it.)

    Raised at start-up, before the spider opens; ``scrapy crawl`` then logs it as one ERROR
    line and exits with status 1 (:mod:`scrapy_whittle.scrapy.startup`)."""

    #: set once the message has been logged (the start-up check logs it itself)
    reported: bool = False
