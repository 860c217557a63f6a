"""The report's figures (PNG, matplotlib's object API: no pyplot, no global state).

matplotlib is optional (``pip install 'scrapy-whittle[report]'``): :func:`available` says
whether it can be imported; the page is written without figures when it cannot.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from scrapy_whittle.report.data import CrawlReport
from scrapy_whittle.report.table import percent, period_name

if TYPE_CHECKING:
    from matplotlib.figure import Figure

INSTALL = "pip install 'scrapy-whittle[report]'   (or: pip install matplotlib)"
MAX_BARS = 240                  # epochs are summed into at most this many bars / points
ACCENT, MUTED, GRID = "#d95f02", "#7570b3", "#dddddd"


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def write_all(report: CrawlReport, out: Path) -> dict[str, str]:
    """Write every figure that has something to show into ``out``; name -> file name."""
    made = {}
    for name, draw in (("allocation", allocation), ("timeline", timeline),
                       ("errors", errors), ("index", index), ("budget", budget)):
        fig = draw(report)
        if fig is None:
            continue
        path = out / f"{name}.png"
        fig.savefig(path, dpi=110)
        made[name] = path.name
    return made


def _figure(width: float, height: float, heights: tuple[float, ...] = (1.0,)
            ) -> tuple[Figure, list]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(len(heights), 1, sharex=True, squeeze=False,
                        height_ratios=list(heights))[:, 0].tolist()
    for ax in axes:
        ax.grid(True, color=GRID, linewidth=0.6)
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    return fig, axes


def allocation(report: CrawlReport) -> Figure | None:
    """Crawls per hour against the learned publishing rate, one dot per source."""
    s = report.sources
    hours = max((report.at - report.origin) / 3600.0, 1e-9)
    rate = np.asarray(s["rate_per_hour"], dtype=np.float64)
    learned = np.isfinite(rate)
    label = "learned publishing rate (items / hour)"
    if not learned.any():          # a policy that learns no rate: what was found instead
        rate = s["new_items"] / hours
        label = "new items found per hour of crawl"
    crawls = s["crawls"] / hours
    show = np.isfinite(rate) & (rate > 0) & (crawls > 0)
    if not show.any():
        return None
    fig, (ax,) = _figure(8.5, 5.0)
    value = np.asarray(s["mean_value"], dtype=np.float64)
    colour = np.where(np.isfinite(value), value, 0.0)[show]
    points = ax.scatter(rate[show], crawls[show], c=colour, cmap="viridis", s=28,
                        alpha=0.85, edgecolors="none")
    if np.isfinite(value[show]).any():
        fig.colorbar(points, ax=ax, label="learned value of an entry")
    planned = show & s["planned"]
    if planned.any():
        ax.scatter(rate[planned], crawls[planned], s=90, facecolors="none",
                   edgecolors=ACCENT, linewidths=1.4,
                   label=f"chosen for epoch {report.plan_epoch} (next selection)")
    lo = min(rate[show].min(), crawls[show].min()) / 1.5
    hi = max(rate[show].max(), crawls[show].max()) * 1.5
    ax.plot([lo, hi], [lo, hi], "--", color="#999999", linewidth=1,
            label="one crawl per new item")
    budget_per_hour = report.budget * 3600.0 / report.period
    ax.set(xscale="log", yscale="log", xlabel=label, ylabel="crawls per hour",
           title=f"Where the budget went: {int(s['crawls'].sum())} crawls of "
                 f"{report.n} sources (budget {_count(budget_per_hour)} crawls / hour)")
    ax.legend(loc="upper left", frameon=False)
    return fig


def _bins(report: CrawlReport) -> tuple[np.ndarray, np.ndarray, int]:
    """Epoch start times (as datetimes) of the bars and, per epoch, the bar it falls in."""
    epochs = report.epochs["epoch"]
    per_bar = max(1, -(-len(epochs) // MAX_BARS))
    first = int(epochs.min()) if len(epochs) else 0
    bar = (epochs - first) // per_bar
    starts = np.unique(bar)
    times = np.array([dt.datetime.fromtimestamp(report.origin + (first + b * per_bar)
                                                * report.period, dt.UTC).replace(tzinfo=None)
                      for b in starts])
    return times, np.searchsorted(starts, bar), per_bar


def _summed(values: np.ndarray, where: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(where, weights=values.astype(np.float64), minlength=n)


def timeline(report: CrawlReport) -> Figure | None:
    """Utility captured and budget used per epoch."""
    e = report.epochs
    if not len(e["epoch"]):
        return None
    times, where, per_bar = _bins(report)
    n = len(times)
    counts = np.bincount(where, minlength=n)
    utility = _summed(e["utility"], where, n)
    items = _summed(e["new_items"], where, n)
    used = _summed(e["cost"], where, n) / (report.budget * counts)
    fig, (top, bottom) = _figure(8.5, 5.2, heights=(2.2, 1.0))
    width = dt.timedelta(seconds=report.period * per_bar * 0.85)
    top.bar(times, utility, width=width, align="edge", color=MUTED, label="utility captured")
    twin = top.twinx()
    twin.plot(times + width / 2, items, color=ACCENT, linewidth=1.2, label="new entries")
    twin.set_ylabel("new entries", color=ACCENT)
    twin.spines["top"].set_visible(False)
    unit = "epoch" if per_bar == 1 else f"{per_bar} epochs"
    top.set(ylabel=f"utility per {unit}", title="What the crawl captured, and the budget it used")
    bottom.step(times, used * 100, where="post", color=MUTED)
    bottom.axhline(100, color=ACCENT, linestyle="--", linewidth=1)
    bottom.set(ylabel="budget used (%)", ylim=(0, max(110, float(np.nanmax(used)) * 105)),
               xlabel="epoch start (UTC)")
    if report.epoch in set(e["epoch"].tolist()):
        last = ("current epoch (still running)" if report.live
                else "last epoch (the crawl stopped in it)")
        bottom.annotate(last, xy=(times[-1], used[-1] * 100),
                        xytext=(-10, -22), textcoords="offset points", ha="right",
                        fontsize=8, color="#666666")
    fig.autofmt_xdate()
    return fig


def errors(report: CrawlReport) -> Figure | None:
    """Failed crawls per epoch, stacked by kind (the six commonest, then the rest)."""
    if not report.errors or not len(report.epochs["epoch"]):
        return None
    times, where, per_bar = _bins(report)
    n = len(times)
    kinds = list(report.errors)
    shown = kinds[:6]
    series = {k: _summed(report.errors[k], where, n) for k in shown}
    if len(kinds) > 6:
        series["other"] = sum(_summed(report.errors[k], where, n) for k in kinds[6:])
    fig, (ax,) = _figure(8.5, 3.8)
    width = dt.timedelta(seconds=report.period * per_bar * 0.85)
    bottom = np.zeros(n)
    colours = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#999999"]
    for (kind, values), colour in zip(series.items(), colours, strict=False):
        ax.bar(times, values, width=width, align="edge", bottom=bottom, color=colour,
               label=f"{kind} ({int(values.sum())})")
        bottom += values
    unit = "epoch" if per_bar == 1 else f"{per_bar} epochs"
    ax.set(ylabel=f"failed crawls per {unit}", xlabel="epoch start (UTC)",
           title="Errors by kind (total in each kind's label)", ylim=(0, bottom.max() * 1.3))
    ax.legend(loc="upper left", frameon=False, ncols=min(4, len(series)), fontsize=8)
    fig.autofmt_xdate()
    return fig


def index(report: CrawlReport, top: int = 25) -> Figure | None:
    """The sources with the highest index now, marked when planned for the next epoch."""
    if not report.ranks:
        return None
    s = report.sources
    prio = np.asarray(s["index"], dtype=np.float64)
    # sources that may not be fetched at the next selection (backing off, minimum interval)
    # are left out: their index says nothing about what is crawled next
    waiting = s["not_before"] > report.plan_at + 1e-6
    ids = np.flatnonzero(np.isfinite(prio) & ~waiting)
    if not ids.size:
        return None
    ids = ids[np.argsort(-prio[ids], kind="stable")][:top][::-1]
    fig, (ax,) = _figure(8.5, 1.0 + 0.22 * len(ids))
    colours = [ACCENT if s["planned"][i] else MUTED for i in ids]
    ax.barh(np.arange(len(ids)), prio[ids], color=colours)
    ax.set_yticks(np.arange(len(ids)), [_short(str(s["url"][i])) for i in ids], fontsize=7)
    left_out = int((np.isfinite(prio) & waiting).sum())
    ax.set(xlabel=f"index (policy {report.policy}) at epoch {report.plan_epoch}; orange: "
                  "chosen for that epoch",
           title=f"The {len(ids)} sources ranked highest"
                 + (f" ({left_out} backing off, not shown)" if left_out else ""))
    return fig


def budget(report: CrawlReport) -> Figure | None:
    """The upper bound on the value any policy captures against the budget (the report's
    budget curve), the crawl's budget marked."""
    from matplotlib.ticker import FuncFormatter

    curve = report.budget_curve
    if curve is None or not curve:
        return None
    _, unit = period_name(report.period)
    fig, (ax,) = _figure(8.5, 4.2)
    ax.plot(curve.budgets, curve.shares * 100, "-o", color=MUTED, markersize=3.5,
            linewidth=1.4, label="upper bound on any policy")
    now = curve.share_at(curve.current)
    ax.axvline(curve.current, color=ACCENT, linestyle="--", linewidth=1)
    ax.plot([curve.current], [now * 100], "o", color=ACCENT, markersize=7,
            label=f"WHITTLE_BUDGET = {curve.current:g}: {percent(now)}")
    ax.axvline(curve.saturation, color="#999999", linestyle=":", linewidth=1,
               label=f"{curve.saturation:.3g}: every source with value, every {unit}")
    ax.set(xscale="log", ylim=(0, 105), xlabel=f"budget (crawls per {unit})",
           ylabel="share of the value available (%)",
           title=f"What a budget can capture ({curve.sources} sources with learned "
                 "parameters)")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.legend(loc="lower right", frameon=False)
    return fig


def _short(url: str, width: int = 48) -> str:
    url = url.split("://", 1)[-1]
    return url if len(url) <= width else url[:20] + "…" + url[-(width - 21):]


def _count(value: float) -> str:
    """A rate of crawls as a reader writes it: 10,800 or 2.5, never 1.08e+04."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
