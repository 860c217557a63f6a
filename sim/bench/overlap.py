"""Overlapping feeds: the same story in several feeds, crawled by the re-crawl service with
each story identity (``WHITTLE_DEDUP``), at the same budget.

    python -m sim.bench overlap --fronts 4 --budget 3 --epochs 240 --seeds 5

The web (:class:`OverlapWeb`, time in hours, every stream Poisson): ``--fronts`` outlets,
each with a front page publishing its own stories, and two section feeds that repeat some of
the front page's stories (a section's copy has its own id and a tracked link) and publish
stories of their own; two wires whose stories some front pages also list (each front page
its own page for it, with the wire's URL as id); and one aggregator that repeats every story
of the first front page an hour or more later (its own ids, tracked links) and has nothing
of its own. Each feed
shows its newest ``WINDOW`` entries; a copy appears a little after the original.

The crawl: :class:`~scrapy_whittle.service.recrawl.RecrawlService` with the learned Whittle
policy (``--policy``), ``--budget`` crawls an hour, every fetch instantaneous, driven on a
simulated clock. Reported per identity, averaged over ``--seeds`` webs and crawls (the same
web for both identities at each seed):

* ``items``: the items emitted (the new entries the service returned);
* ``duplicates``: items whose story had been emitted already;
* ``stories``: distinct stories captured, and ``story_share`` of those published;
* ``delay_h``: mean hours from a story's first publication to its first capture;
* ``aggregator_crawls``: crawls of the aggregator, the feed that only repeats another.

``overlap`` is the share of the stories published that two or more feeds list.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.service.clock import SimulatedClock
from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.recrawl import RecrawlService
from scrapy_whittle.service.sources.registry import SourceSpec
from sim.bench import harness

WINDOW = 20
HOUR = 3600.0
#: hours after the original that a copy appears, at most
LAG = 0.25
#: hours after the original that the aggregator lists a story (it picks stories up late)
AGGREGATOR_LAG = (4.0, 8.0)
#: a front page's story is repeated by one of its sections with this probability
SECTION_SHARE = 0.35
#: a wire story is listed by each front page with this probability
WIRE_PICKUP = 0.3


@dataclass
class Listing:
    at: float           # hours
    story: int
    key: str
    link: str


class OverlapWeb:
    """The feeds of the module docstring for ``hours`` hours, drawn from ``seed``."""

    def __init__(self, fronts: int, hours: float, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.urls: list[str] = []
        self.listings: list[list[Listing]] = []
        self.published: list[float] = []             # story -> first publication (h)
        self.feeds_of: list[int] = []                # story -> feeds listing it

        def feed(url: str) -> int:
            self.urls.append(url)
            self.listings.append([])
            return len(self.urls) - 1

        def new_story(at: float) -> int:
            self.published.append(at)
            self.feeds_of.append(0)
            return len(self.published) - 1

        def listed(f: int, at: float, story: int, key: str, link: str) -> None:
            self.listings[f].append(Listing(at, story, key, link))
            self.feeds_of[story] += 1

        def times(rate: float) -> np.ndarray:
            return np.sort(rng.uniform(0, hours, rng.poisson(rate * hours)))

        front_ids = [feed(f"https://front{o}.example/rss") for o in range(fronts)]
        sections = [[feed(f"https://front{o}.example/{s}/rss") for s in ("world", "sport")]
                    for o in range(fronts)]
        wires = [feed(f"https://wire{w}.example/rss") for w in range(2)]
        self.aggregator = feed("https://aggregator.example/rss")
        for o, f in enumerate(front_ids):
            rate = float(rng.uniform(0.5, 3.0))
            for t in times(rate):
                sid = new_story(t)
                link = f"https://front{o}.example/{sid}"
                listed(f, t, sid, link, link)
                if rng.random() < SECTION_SHARE:
                    s = int(rng.integers(2))
                    listed(sections[o][s], t + rng.uniform(0, LAG), sid, f"section-{s}-{sid}",
                           f"http://FRONT{o}.example/{sid}/?utm_source=section&utm_medium=rss")
                if o == 0:
                    listed(self.aggregator, t + rng.uniform(*AGGREGATOR_LAG), sid, f"agg-{sid}",
                           f"{link}?utm_source=aggregator#top")
            for s, sf in enumerate(sections[o]):
                for t in times(rate / 2):
                    sid = new_story(t)
                    listed(sf, t, sid, f"tag:front{o},{s}:{sid}",
                           f"https://front{o}.example/{s}/{sid}")
        for w, f in enumerate(wires):
            for t in times(float(rng.uniform(1.0, 3.0))):
                sid = new_story(t)
                url = f"https://wire{w}.example/{sid}"
                listed(f, t, sid, url, url)
                for o, fo in enumerate(front_ids):
                    if rng.random() < WIRE_PICKUP:
                        listed(fo, t + rng.uniform(0, LAG), sid, url,
                               f"https://front{o}.example/wire/{sid}")
        for items in self.listings:
            items.sort(key=lambda x: x.at)
        self.at = [np.array([x.at for x in items]) for items in self.listings]
        self.story_of = {(f, x.key): x.story for f, items in enumerate(self.listings)
                         for x in items}

    def entries(self, f: int, hours: float) -> list[FeedEntry]:
        """What feed ``f`` shows at ``hours``: its newest ``WINDOW`` entries, newest first."""
        end = bisect_right(self.at[f], hours)
        shown = self.listings[f][max(0, end - WINDOW):end][::-1]
        return [FeedEntry(x.key, None, x.link, x.at * HOUR, None) for x in shown]

    @property
    def overlap(self) -> float:
        return float(np.mean(np.array(self.feeds_of) >= 2))


def crawl(web: OverlapWeb, dedup: str, budget: float, epochs: int, policy: str = "whittle",
          seed: int = 0) -> dict[str, float]:
    """Crawl ``web`` for ``epochs`` hours with the identity ``dedup``; the measures of the
    module docstring."""
    config = WhittleConfig.from_settings({
        "WHITTLE_BUDGET": budget, "WHITTLE_PERIOD": HOUR, "WHITTLE_POLICY": policy,
        "WHITTLE_DEDUP": dedup, "WHITTLE_SEED": seed, "WHITTLE_MAX_EPOCHS": epochs})
    clock = SimulatedClock(start=0.0)
    service = RecrawlService(config, clock=clock)
    service.open([SourceSpec(url=u) for u in web.urls])
    ids = [service.source_id(u) for u in web.urls]
    feed_of = {sid: f for f, sid in enumerate(ids)}
    items = duplicates = 0
    captured: dict[int, float] = {}
    crawls = np.zeros(len(web.urls), dtype=np.int64)
    while service.has_crawls():
        while (c := service.next_crawl()) is not None:
            f = feed_of[c.source]
            crawls[f] += 1
            now = clock.now() / HOUR
            for e in service.feed_fetched(c, web.entries(f, now)).entries:
                story = web.story_of[f, e.key]
                items += 1
                if story in captured:
                    duplicates += 1
                else:
                    captured[story] = now
        if service.wake_at == float("inf"):
            break
        clock.advance_to(service.wake_at)
    service.close()
    published = np.array(web.published)
    seen = np.fromiter(captured, dtype=np.int64)
    delays = np.array([captured[s] for s in captured]) - published[seen]
    horizon = epochs
    return {"items": items, "duplicates": duplicates, "stories": len(captured),
            "story_share": len(captured) / max(1, int((published < horizon).sum())),
            "delay_h": float(delays.mean()) if delays.size else float("nan"),
            "aggregator_crawls": int(crawls[web.aggregator]),
            "crawls": int(crawls.sum())}


def run(fronts: int, budget: float, epochs: int, seeds: int, policy: str = "whittle"
        ) -> dict[str, object]:
    out: dict[str, object] = {"fronts": fronts, "budget": budget, "epochs": epochs,
                              "seeds": seeds, "policy": policy}
    per: dict[str, list[dict[str, float]]] = {"link": [], "entry": []}
    overlap = []
    for seed in range(seeds):
        web = OverlapWeb(fronts, epochs + 1.0, seed=seed)
        overlap.append(web.overlap)
        out["feeds"] = len(web.urls)
        for dedup in per:
            per[dedup].append(crawl(web, dedup, budget, epochs, policy, seed))
    out["overlap"] = float(np.mean(overlap))
    for dedup, rows in per.items():
        out[dedup] = {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}
    return out


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser("overlap", __doc__)
    parser.add_argument("--fronts", type=int, default=4)
    parser.add_argument("--budget", type=float, default=3.0)
    parser.add_argument("--epochs", type=int, default=240)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--policy", default="whittle")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run(args.fronts, args.budget, args.epochs, args.seeds, args.policy)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['feeds']} feeds, {result['overlap']:.0%} of stories in two or more feeds; "
          f"budget {args.budget:g}/h, {args.epochs} h, policy {args.policy}, "
          f"{args.seeds} seeds")
    print(f"{'WHITTLE_DEDUP':>14} {'items':>8} {'dupl.':>8} {'stories':>8} {'share':>7} "
          f"{'delay h':>8} {'aggr. crawls':>13}")
    for dedup in ("entry", "link"):
        r = result[dedup]
        print(f"{dedup:>14} {r['items']:8.0f} {r['duplicates']:8.0f} {r['stories']:8.0f} "
              f"{r['story_share']:7.1%} {r['delay_h']:8.2f} {r['aggregator_crawls']:13.0f}")
