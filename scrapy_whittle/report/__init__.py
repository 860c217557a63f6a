"""Crawl reports: what a crawl's state file (``JOBDIR/whittle.sqlite``) says, for people.

:func:`load_report` reads the state without writing to it (:mod:`.data`); :mod:`.table`
formats the per-source table; :mod:`.page` writes the HTML page and :mod:`.figures` its PNG
figures (matplotlib, optional). ``scrapy whittle report`` and ``scrapy whittle sources``
(:mod:`scrapy_whittle.scrapy.commands.whittle`) are the command-line front.
"""

from __future__ import annotations

from scrapy_whittle.report.data import CrawlReport, ReportError, load_report

__all__ = ["CrawlReport", "ReportError", "load_report"]
