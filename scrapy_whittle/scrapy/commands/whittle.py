"""``scrapy whittle``: what a crawl learned, read from its state file.

::

    scrapy whittle report  [JOBDIR] [-o DIR] [--limit N]   # HTML page + PNG figures
    scrapy whittle sources [JOBDIR] [--sort KEY] [--limit N]   # the per-source table
    scrapy whittle trace   [JOBDIR] -o FILE     # the publication times seen, a trace CSV
    scrapy whittle discover URL... -o feeds.opml   # the feeds of sites (docs/sites.md)

JOBDIR defaults to the project's ``JOBDIR`` setting. The state file is only read (a running
crawl is not disturbed). See docs/report.md.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

if TYPE_CHECKING:
    import argparse

SUBCOMMANDS = ("report", "sources", "trace", "discover")


class Command(ScrapyCommand):
    requires_project = False
    requires_crawler_process = False

    def syntax(self) -> str:
        return "report|sources|trace [JOBDIR] [options] | discover URL... -o FILE"

    def short_desc(self) -> str:
        return "Report what a scrapy-whittle crawl learned (from JOBDIR/whittle.sqlite)"

    def long_desc(self) -> str:
        return ("'report' writes an HTML page with figures (-o DIR, default whittle-report); "
                "'sources' prints the per-source table; 'trace' writes the publication times "
                "of the entries the crawl found, per feed, as the CSV that python -m sim.bench "
                "--trace replays (-o FILE; gzip when it ends in .gz). JOBDIR defaults to the "
                "JOBDIR setting. The crawl's state file is only read. 'discover' fetches each "
                "URL through Scrapy, finds the feeds of the sites among them (docs/sites.md) "
                "and writes them as OPML (-o FILE).")

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        from scrapy_whittle.report.table import SORT_KEYS

        parser.add_argument("-o", "--output", metavar="DIR|FILE", default=None,
                            help="report: the directory to write (default: whittle-report); "
                                 "trace: the file to write (.gz: gzip); discover: the OPML "
                                 "file to write")
        parser.add_argument("--limit", type=int, default=None, metavar="N",
                            help="at most N sources in the table (report default 500, "
                                 "sources default all; 0: all)")
        parser.add_argument("--sort", choices=sorted(SORT_KEYS), default="index",
                            help="sources: sort by this column (default index)")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if not args or args[0] not in SUBCOMMANDS:
            raise UsageError(f"the first argument must be one of: {', '.join(SUBCOMMANDS)}")
        if args[0] == "discover":
            self._discover(args[1:], opts.output)
            return
        if len(args) > 2:
            raise UsageError("too many arguments")
        jobdir = args[1] if len(args) > 1 else self.settings.get("JOBDIR")
        if not jobdir:
            raise UsageError("give the crawl's JOBDIR (or run inside a project whose JOBDIR "
                             "setting is set)")
        if args[0] == "trace":
            self._trace(jobdir, opts.output)
            return
        from scrapy_whittle.report import ReportError, load_report

        try:
            report = load_report(jobdir, settings=self.settings)
        except ReportError as exc:
            print(f"scrapy whittle {args[0]}: {exc}", file=sys.stderr)
            self.exitcode = 1
            return
        if args[0] == "sources":
            from scrapy_whittle.report.table import text

            sys.stdout.write(text(report, sort=opts.sort, limit=opts.limit))
            return
        from scrapy_whittle.report import figures, page

        limit = 500 if opts.limit is None else opts.limit
        path = page.write(report, opts.output or "whittle-report", limit=limit)
        print(f"wrote {path}")
        if not figures.available():
            print(f"without figures: matplotlib is not installed ({figures.INSTALL})")

    def _discover(self, addresses: list[str], output: str | None) -> None:
        if not addresses or not output:
            raise UsageError("discover: give the addresses and the OPML file to write: "
                             "scrapy whittle discover URL... -o feeds.opml")
        from pathlib import Path

        from scrapy_whittle.scrapy.commands.discover import discover, opml, summary

        found = discover(self.settings, addresses)
        Path(output).write_bytes(opml(found))
        sys.stdout.write(summary(found))
        n = len({f.url for feeds in found.values() for f in feeds})
        print(f"wrote {output}: {n} feeds of {len(addresses)} addresses")
        if not n:
            self.exitcode = 1

    def _trace(self, jobdir: str, output: str | None) -> None:
        if not output:
            raise UsageError("trace: give the file to write with -o FILE (.gz: gzip)")
        from scrapy_whittle.report import ReportError
        from scrapy_whittle.report.publications import read_publications
        from scrapy_whittle.report.trace import Trace, write_trace

        try:
            found = read_publications(jobdir)
            write_trace(Trace(found.names, found.source, found.published, found.value), output,
                        time_unit_seconds=1.0)
        except (ReportError, OSError) as exc:
            print(f"scrapy whittle trace: {exc}", file=sys.stderr)
            self.exitcode = 1
            return
        print(f"wrote {output}: {found.published.shape[0]} entries of {len(found.names)} "
              "sources")
