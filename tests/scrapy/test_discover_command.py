"""``scrapy whittle discover URL... -o feeds.opml`` against the simulated sites: the OPML holds
the feeds each site links, a feed's own address as itself, and no decoy."""

from __future__ import annotations

import json
import urllib.request

from scrapy_whittle.service.sources.registry import parse_opml
from tests.scrapy.conftest import Server
from tests.scrapy.test_report import entry_points, scrapy


def test_discover_writes_the_feeds_of_sites_as_opml(tmp_path):
    server = Server("--scenario", "news-mix", "--n", "18", "--kinds", "mix", "--sites", "5")
    try:
        with urllib.request.urlopen(f"{server.url}/sites.json") as answer:
            sites = json.load(answer)["sites"]
        feed = f"{server.url}/feed/0.xml"
        out = tmp_path / "feeds.opml"
        result = scrapy(entry_points(tmp_path / "meta"), "whittle", "discover",
                        *[s["url"] for s in sites], feed, "-o", str(out), cwd=tmp_path)
    finally:
        server.stop()
    assert result.returncode == 0, result.stderr[-3000:]
    specs = parse_opml(out.read_bytes())
    expected = [url for s in sites for url in s["feeds"]]
    assert sorted(s.url for s in specs) == sorted(set(expected) | {feed})
    assert len(specs) == len({s.url for s in specs})           # each feed once
    assert f"wrote {out}" in result.stdout
