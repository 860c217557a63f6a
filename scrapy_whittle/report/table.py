"""The per-source table of a crawl report, as text (``scrapy whittle sources``) and as rows of
formatted cells for the HTML page: URL, learned items per hour, interest half-life, value of an
entry, current index, crawls, errors, last crawl and when the next crawl is planned; the
users' measures of the crawl (:func:`measures`); what other budgets would capture
(:func:`budget_sentence`, :func:`budget_rows`); the hosts that limit the crawl
(:func:`host_rows`, :func:`hosts_text`)."""

from __future__ import annotations

import math
import time

import numpy as np

from scrapy_whittle.report.data import CrawlReport
from scrapy_whittle.service.hosts.host_allowances import delay_limit
from scrapy_whittle.service.sources.registry import url_hosts

COLUMNS = ("url", "items/h", "half-life", "value", "index", "crawls", "errors", "last crawl",
           "next planned")
#: ``--sort`` keys: the column sorted by, descending except for the URL
SORT_KEYS = {"index": "index", "rate": "rate_per_hour", "value": "mean_value",
             "crawls": "crawls", "errors": "errors", "utility": "utility", "url": "url"}


def utc(t: float, seconds: bool = False) -> str:
    if not math.isfinite(t) or t <= 0:
        return "never"
    return time.strftime("%Y-%m-%d %H:%M" + (":%S" if seconds else ""), time.gmtime(t))


def duration(hours: float) -> str:
    """A half-life as a person says it: 40 s, 12 min, 5.1 h, 3.2 d."""
    if not math.isfinite(hours):
        return "–"
    seconds = hours * 3600
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if hours < 48:
        return f"{hours:.3g} h"
    return f"{hours / 24:.3g} d"


def number(x: float, digits: int = 3) -> str:
    if not math.isfinite(x):
        return "–"
    if x == 0:
        return "0"
    if abs(x) >= 10 ** digits:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


#: periods a person names: seconds -> (per one, its name)
PERIOD_NAMES = {1.0: ("a second", "second"), 60.0: ("a minute", "minute"),
                3600.0: ("an hour", "hour"), 86400.0: ("a day", "day"),
                604800.0: ("a week", "week")}


def period_name(period: float) -> tuple[str, str]:
    """("an hour", "hour") for a period of 3600 s; ("per 15 min", "15 min") for one that has
    no name of its own."""
    if period in PERIOD_NAMES:
        return PERIOD_NAMES[period]
    name = duration(period / 3600)
    return f"per {name}", name


def percent(share: float) -> str:
    """A share as a person reads it: 100% only when it is all (never rounded up to it)."""
    if not math.isfinite(share):
        return "–"
    if share >= 1.0 - 1e-9:
        return "100%"
    return ">99%" if round(share * 100) >= 100 else f"{share:.0%}"


def budget_sentence(report: CrawlReport) -> str:
    """What the crawl's budget captures of the value available, and what twice (or half) of
    it would: the curve's own figures, in the crawl's period. The curve's message when there
    is no curve."""
    curve = report.budget_curve
    if curve is None or not curve:
        return curve.message if curve is not None else ""
    per, unit = period_name(report.period)
    now = curve.share_at(curve.current)
    if curve.current < curve.saturation * (1 - 1e-9):
        more = min(2 * curve.current, curve.saturation)
        return (f"At {number(curve.current)} crawls {per} you capture {percent(now)} of what "
                f"{number(curve.saturation)} would; {number(more)} would capture "
                f"{percent(curve.share_at(more))}.")
    half = curve.current / 2
    return (f"At {number(curve.current)} crawls {per} you capture all the value available "
            f"({number(curve.saturation)} would: every source with value crawled every "
            f"{unit}); {number(half)} would capture {percent(curve.share_at(half))}.")


def budget_rows(report: CrawlReport) -> list[tuple[str, str, str]]:
    """The curve as (budget, share, mark) rows: the crawl's budget doubled and halved, and
    the budget where value saturates; mark names the crawl's budget and that one."""
    curve = report.budget_curve
    if curve is None or not curve:
        return []
    _, unit = period_name(report.period)
    out = []
    for budget, share in zip(curve.budgets.tolist(), curve.shares.tolist(), strict=True):
        octave = math.log2(budget / curve.current)
        current = math.isclose(budget, curve.current, rel_tol=1e-9)
        saturation = math.isclose(budget, curve.saturation, rel_tol=1e-9)
        if not (current or saturation or abs(octave - round(octave)) < 1e-9):
            continue
        mark = ("WHITTLE_BUDGET" if current else "") + (
            ("; " if current else "") + f"every source with value, every {unit}"
            if saturation else "")
        out.append((number(budget), percent(share), mark))
    return out


def measures(report: CrawlReport) -> dict[str, str]:
    """The users' measures, formatted: entries captured and missed (estimated), crawls per
    captured entry, discovery delay (mean, median, 90th percentile; "–" where not measured)."""
    m = report.measures
    delays = m.delays.summary() if m.delays is not None else {}

    def wait(key: str) -> str:
        return duration(delays.get(key, math.nan) / 3600)

    return {"entries captured": f"{m.captured:,}",
            "entries missed (estimated)": number(m.missed, 2) if math.isfinite(m.missed)
            else "–",
            "crawls per entry": number(m.crawls_per_item),
            "discovery delay, mean": wait("mean_s"),
            "discovery delay, median": wait("median_s"),
            "discovery delay, 90th percentile": wait("p90_s")}


def order(report: CrawlReport, sort: str = "index") -> np.ndarray:
    """Source ids by ``sort`` (a SORT_KEYS key): largest first, NaN last; URL alphabetical.
    Sorting by index falls back to the learned rate when the policy does not rank."""
    s = report.sources
    key = SORT_KEYS[sort]
    if key == "index" and not report.ranks:
        key = "rate_per_hour"
    if key == "url":
        return np.argsort(s["url"].astype(str), kind="stable")
    values = np.asarray(s[key], dtype=np.float64)
    return np.lexsort((s["id"], np.isnan(values), -np.nan_to_num(values, nan=0.0)))


def next_planned(report: CrawlReport, sid: int) -> str:
    s = report.sources
    flags = int(s["flags"][sid])
    if (flags >> 35) & 1:
        into = next((i for u, i in report.aliases if u == s["url"][sid]), None)
        return f"moved onto source {into}'s URL: merged into it"
    if (flags >> 33) & 1:
        return "left the source list"
    if (flags >> 34) & 1:
        return f"retired: next probe {utc(float(s['not_before'][sid]))}"
    if s["planned"][sid]:
        return f"epoch {report.plan_epoch}, {utc(report.plan_at)}"
    not_before = float(s["not_before"][sid])
    if s["failures"][sid] and not_before > report.at:
        return f"backing off until {utc(not_before)}"
    if not_before > report.plan_at:
        return f"not before {utc(not_before)}"
    return f"not in epoch {report.plan_epoch}" if not report.no_plan else "–"


def rows(report: CrawlReport, sort: str = "index", limit: int | None = None
         ) -> list[tuple[str, ...]]:
    """Formatted cells (COLUMNS) of the first ``limit`` sources in ``sort`` order."""
    s = report.sources
    ids = order(report, sort)
    if limit is not None and limit > 0:
        ids = ids[:limit]
    out = []
    for sid in ids.tolist():
        # never fetched successfully: the estimates are the priors, nothing learned yet
        learned = report.learned[sid]
        nan = math.nan
        out.append((
            str(s["url"][sid]), number(s["rate_per_hour"][sid] if learned else nan),
            duration(s["half_life_hours"][sid] if learned else nan),
            number(s["mean_value"][sid] if learned else nan),
            number(s["index"][sid]), str(int(s["crawls"][sid])), str(int(s["errors"][sid])),
            utc(s["last_crawl"][sid]), next_planned(report, sid)))
    return out


def text(report: CrawlReport, sort: str = "index", limit: int | None = None) -> str:
    """The table as aligned text, with a header naming the crawl."""
    body = rows(report, sort, limit)
    widths = [max([len(c)] + [len(r[i]) for r in body]) for i, c in enumerate(COLUMNS)]
    numeric = {1, 2, 3, 4, 5, 6}

    def line(cells) -> str:
        return "  ".join(c.rjust(w) if i in numeric else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    head = [f"# {report.path}: {report.n} sources, policy {report.policy}, budget "
            f"{report.budget:g} per {report.period:g} s; state as of {utc(report.at, True)} "
            f"UTC (epoch {report.epoch})"]
    m = measures(report)
    delay = "discovery delay"
    head.append(f"# entries captured {m['entries captured']}, missed (estimated) "
                f"{m['entries missed (estimated)']}, crawls per entry {m['crawls per entry']}; "
                f"{delay} (publication to capture) mean {m[delay + ', mean']}, median "
                f"{m[delay + ', median']}, 90th percentile {m[delay + ', 90th percentile']}")
    head += [f"# {line}" for line in budget_text(report)]
    head += [f"# {line}" for line in lifecycle_text(report)]
    head += [f"# {line}" for line in hosts_text(report)]
    if report.no_plan:
        head.append(f"# no index or plan: {report.no_plan}")
    head += [f"# {note}" for note in report.notes]
    if limit is not None and 0 < limit < report.n:
        head.append(f"# the first {limit} of {report.n} sources by {sort}")
    return "\n".join([*head, line(COLUMNS), *(line(r) for r in body)]) + "\n"


def lifecycle_text(report: CrawlReport) -> list[str]:
    """The retired sources' count and each moved source's old URLs (none: no line)."""
    out = []
    retired = report.retired()
    if retired:
        out.append(f"{retired} sources retired (dead or silent: probed only, outside the "
                   "budget)")
    for sid, old in sorted(report.moved().items()):
        out.append(f"source {sid} moved to {report.sources['url'][sid]} (was "
                   f"{', '.join(old)})")
    return out


#: the columns of :func:`host_rows`
HOST_COLUMNS = ("host", "feeds", "limit", "delay", "allowance now", "bore", "cuts")
#: the row of the hosts ``DOWNLOAD_DELAY`` limits without a setting of their own
OTHER_HOSTS = "every other host"


def host_rows(report: CrawlReport) -> list[tuple[str, int, float, float, float, float, int]]:
    """(host, its feeds, limit set (``WHITTLE_HOST_LIMITS``; inf: none), delay (s; 0: none),
    allowance now (crawls per epoch; inf: none), what it bore when it last objected (NaN:
    never throttled), throttle cuts) of each host with a limit, a delay or a throttle,
    throttled ones first; with ``DOWNLOAD_DELAY``, a last row for :data:`OTHER_HOSTS`."""
    throttled = {h: (a, c, n) for h, a, c, n in report.hosts}
    delays = {h: d for h, d in report.slot_delays.items() if d > 0}
    names = sorted(set(report.host_limits) | set(delays) | set(throttled),
                   key=lambda h: (h not in throttled, h))
    per_host: dict[str, int] = {}
    if names or report.download_delay > 0:
        for host in url_hosts(list(report.sources["url"])):
            per_host[host or ""] = per_host.get(host or "", 0) + 1
    rows = []
    for host in names:
        limit = float(report.host_limits.get(host, math.inf))
        delay = report.slot_delays.get(host, report.download_delay)
        allowance = min(limit, delay_limit(delay, report.period))
        bore, cuts = math.nan, 0
        if host in throttled:
            allowance, ceiling, cuts = throttled[host]
            bore = math.nan if ceiling is None else float(ceiling)
        rows.append((host, per_host.pop(host, 0), limit, delay, float(allowance), bore,
                     int(cuts)))
    if report.download_delay > 0:
        others = sum(n for h, n in per_host.items() if h not in report.slot_delays)
        rows.append((OTHER_HOSTS, others, math.inf, report.download_delay,
                     delay_limit(report.download_delay, report.period), math.nan, 0))
    return rows


def host_cells(row) -> list[str]:
    """:func:`host_rows`' row as the cells of :data:`HOST_COLUMNS`."""
    host, feeds, limit, delay, allowance, bore, cuts = row
    return [host, f"{feeds:,}", "–" if math.isinf(limit) else number(limit),
            f"{delay:g} s" if delay > 0 else "–",
            "none" if math.isinf(allowance) else number(allowance),
            "–" if math.isnan(bore) else number(bore), str(cuts)]


def hosts_text(report: CrawlReport) -> list[str]:
    """One line per host that limits the crawl (:func:`host_rows`): a throttled one's
    allowance now against its limit, a limited one's allowance and what sets it (none: no
    line)."""
    out = []
    for host, feeds, limit, delay, allowance, bore, cuts in host_rows(report):
        set_by = ", ".join(s for s in (
            "" if math.isinf(limit) else f"limit {number(limit)}",
            f"delay {delay:g} s" if delay > 0 else "") if s)
        if cuts:
            kept = (f"; it bore {number(bore)} when it last objected"
                    if math.isfinite(bore) and bore < min(limit, delay_limit(
                        delay, report.period)) else "")
            out.append(f"host {host} throttled: {number(allowance)} crawls per epoch now, "
                       f"{set_by or 'limit none set'}{kept} ({cuts} "
                       f"{'cut' if cuts == 1 else 'cuts'} so far)")
        else:
            out.append(f"host {host} limited: {number(allowance)} crawls per epoch "
                       f"({set_by}; {feeds:,} feeds)")
    return out


def budget_text(report: CrawlReport) -> list[str]:
    """The curve for ``scrapy whittle sources``: the sentence, then :func:`budget_rows` as
    an aligned table."""
    curve = report.budget_curve
    if curve is None:
        return []
    if not curve:
        return [curve.message]
    _, unit = period_name(report.period)
    left_out = f"; {curve.left_out} left out, nothing learned" if curve.left_out else ""
    head = f"crawls / {unit}"
    body = budget_rows(report)
    wide = max(len(head), *(len(b) for b, _, _ in body))
    return [f"budget curve (upper bound on any policy, from the parameters learned for "
            f"{curve.sources} sources{left_out}):",
            f"  {budget_sentence(report)}",
            f"  {head.rjust(wide)}  share of the value available",
            *(f"  {b.rjust(wide)}  {v.rjust(4)}" + (f"   <- {m}" if m else "")
              for b, v, m in body)]
