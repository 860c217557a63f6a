"""The report page: ``DIR/index.html`` with its figures beside it as PNG files.

One self-contained page (inline style, no script, no network): a summary of the crawl, the
figures with a line each on how to read them, and the per-source table. Without matplotlib
the page is written all the same, with the table and a note saying how to get the figures.
"""

from __future__ import annotations

import html
from pathlib import Path

from scrapy_whittle.report import figures, table
from scrapy_whittle.report.data import CrawlReport

CAPTIONS = {
    "allocation": "Each dot is a source: how often it was crawled against how fast it "
                  "publishes. A good policy crawls fast, valuable sources (bright, right) more "
                  "often; sources below the dashed line were crawled less than once per new "
                  "entry, so their later entries waited in the feed.",
    "timeline": "Top: the value captured (bars) and the new entries found (line) per epoch. "
                "Bottom: the share of WHITTLE_BUDGET spent in each epoch; below 100% the "
                "crawler had budget it could not use (sources backing off, busy hosts, "
                "download delays).",
    "errors": "Failed crawls per epoch by kind (the whittle/errors/<kind> stats). A failing "
              "source backs off, so a burst of one kind shrinks as its sources are retried "
              "less often.",
    "budget": "The most value any policy could capture at each budget (the Lagrangian upper "
              "bound, from the parameters the crawl learned), as a share of what crawling "
              "every source with value every period captures. Where the curve flattens, "
              "more budget buys little; where it is steep, a larger budget pays.",
    "index": "The policy's ranking at the time of the report (the Whittle index for the "
             "Whittle policies: the value of crawling the source now, per unit of cost). "
             "The top of the ranking, within the budget, is crawled in the next epoch.",
}
TITLES = {"allocation": "Budget allocation against learned rate",
          "timeline": "Captured utility and budget use over time",
          "errors": "Errors by kind over time", "index": "Current index",
          "budget": "Choosing a budget"}

STYLE = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #222;
       max-width: 1100px; margin: 2em auto; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: .2em; } h2 { margin-top: 1.8em; }
.sub { color: #666; margin-top: 0; }
.cards { display: flex; flex-wrap: wrap; gap: .8em; margin: 1.2em 0; }
.card { background: #f4f4f8; border-radius: 8px; padding: .6em 1em; min-width: 8em; }
.card b { display: block; font-size: 1.4em; }
.card span { color: #666; font-size: .85em; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; height: auto; }
figcaption { color: #555; font-size: .9em; max-width: 60em; }
.note { background: #fff6e0; border-left: 4px solid #e6ab02; padding: .6em 1em; }
table { border-collapse: collapse; font-size: .85em; width: 100%; }
th, td { padding: .25em .6em; border-bottom: 1px solid #e4e4e4; text-align: left;
         white-space: nowrap; }
th { position: sticky; top: 0; background: #fff; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
td.url { max-width: 28em; overflow: hidden; text-overflow: ellipsis; }
tr.planned td { background: #fdf0e6; }
code { background: #f4f4f8; padding: 0 .3em; border-radius: 3px; }
"""


#: the class of a number's cell and of its column's header (right-aligned)
NUMBER = ' class="n"'


def write(report: CrawlReport, out: str | Path, *, limit: int = 500,
          with_figures: bool = True) -> Path:
    """Write the page (and its figures, when matplotlib is there) into ``out``; returns the
    path of ``index.html``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    made = figures.write_all(report, out) if with_figures and figures.available() else {}
    page = out / "index.html"
    page.write_text(render(report, made, limit=limit, figures_missing=not made and
                           not figures.available()), encoding="utf-8")
    return page


def render(report: CrawlReport, made: dict[str, str], *, limit: int = 500,
           figures_missing: bool = False) -> str:
    e = html.escape
    s = report.sources
    used = report.completed_budget_use()
    n_errors = int(report.epochs["errors"].sum())
    cards = [
        (f"{report.n:,}", "sources"), (f"{len(report.epochs['epoch']):,}", "epochs with crawls"),
        (f"{int(s['crawls'].sum()):,}", "crawls"), (f"{int(s['new_items'].sum()):,}",
                                                    "new entries"),
        (table.number(float(s["utility"].sum())), "utility captured"),
        ("–" if used is None else f"{used:.0%}", "budget used"),
        (f"{n_errors:,}", "failed crawls"),
        *((value, name) for name, value in table.measures(report).items()
          if name != "entries captured"),
    ]
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>scrapy-whittle report: {e(str(report.path))}</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>Crawl report</h1>",
        f'<p class="sub"><code>{e(str(report.path))}</code>: policy <b>{e(report.policy)}'
        f"</b>, budget {report.budget:g} crawls per {report.period:g} s; state as of "
        f"{table.utc(report.at, True)} UTC (epoch {report.epoch}, the last checkpoint)</p>",
        '<div class="cards">', *(f'<div class="card"><b>{v}</b><span>{k}</span></div>'
                                 for v, k in cards), "</div>",
    ]
    if figures_missing:
        parts.append('<p class="note">The figures need matplotlib, which is not installed: '
                     f"<code>{e(figures.INSTALL)}</code>, then run the report again.</p>")
    if report.no_plan:
        parts.append(f'<p class="note">No index and no plan: {e(report.no_plan)}</p>')
    parts += [f'<p class="note">{e(note)}</p>' for note in report.notes]
    lifecycle = table.lifecycle_text(report)
    if lifecycle:       # the retired and moved sources, before the figures
        parts += ["<h2>Retired and moved sources</h2>", "<ul>",
                  *(f"<li>{e(line)}</li>" for line in lifecycle), "</ul>"]
    hosts = table.host_rows(report)
    if hosts:           # the hosts that limit the crawl: their allowances in the plan
        parts += ["<h2>Hosts that limit the crawl</h2>",
                  f"<p>Crawls per epoch ({report.period:g} s) each host allows in the plan: "
                  "the least of its limit (<code>WHITTLE_HOST_LIMITS</code>) and what its "
                  "delay leaves (<code>DOWNLOAD_SLOTS</code>, <code>DOWNLOAD_DELAY</code>: "
                  "floor(T / delay)), lower while it is throttled (it answered 429 or 503: "
                  "cut, then given back while it answers well). robots.txt Crawl-delay is "
                  "read during the crawl and not kept in the state: not shown.</p>",
                  "<table><thead><tr>",
                  # numbers are right-aligned: so are their headers
                  *(f"<th{NUMBER if i else ''}>{e(c)}</th>"
                    for i, c in enumerate(table.HOST_COLUMNS)),
                  "</tr></thead><tbody>"]
        for row in hosts:
            cells = table.host_cells(row)
            parts.append(f'<tr><td class="url">{e(cells[0])}</td>'
                         + "".join(f'<td class="n">{e(c)}</td>' for c in cells[1:])
                         + "</tr>")
        parts.append("</tbody></table>")
    for name in ("allocation", "timeline", "errors", "index", "budget"):
        if name == "budget":
            parts += [f"<h2>{TITLES[name]}</h2>",
                      f'<p class="budget">{e(table.budget_sentence(report))}</p>']
        if name in made:
            parts += (([] if name == "budget" else [f"<h2>{TITLES[name]}</h2>"])
                      + ["<figure>", f'<img src="{e(made[name])}" alt="{e(TITLES[name])}">',
                         f"<figcaption>{e(CAPTIONS[name])}</figcaption>", "</figure>"])
        elif name == "errors" and not figures_missing and not n_errors:
            parts += [f"<h2>{TITLES[name]}</h2>", "<p>No crawl failed.</p>"]
    shown = min(limit, report.n) if limit > 0 else report.n
    by = "current index" if report.ranks else "learned publishing rate"
    parts += [
        "<h2>Sources</h2>",
        f"<p>{'All' if shown == report.n else f'The first {shown:,} of'} {report.n:,} "
        f"sources by {by}; highlighted: chosen at the next selection (epoch "
        f"{report.plan_epoch}). "
        "<code>scrapy whittle sources JOBDIR</code> prints the whole table.</p>",
        "<table><thead><tr>", *(f"<th{NUMBER if 1 <= i < 7 else ''}>{e(c)}</th>"
                                for i, c in enumerate(table.COLUMNS)),
        "</tr></thead><tbody>",
    ]
    ids = table.order(report)[:shown]
    for sid, cells in zip(ids.tolist(), table.rows(report, limit=shown), strict=True):
        cls = ' class="planned"' if s["planned"][sid] else ""
        tds = [f'<td class="url" title="{e(cells[0])}">{e(cells[0])}</td>']
        tds += [f'<td class="n">{e(c)}</td>' for c in cells[1:7]]
        tds += [f"<td>{e(c)}</td>" for c in cells[7:]]
        parts.append(f"<tr{cls}>{''.join(tds)}</tr>")
    parts += ["</tbody></table>", "</body></html>"]
    return "\n".join(parts) + "\n"
