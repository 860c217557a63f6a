"""sim.serve and sim.web.feedweb: feeds, OPML, parameters, conditional GET, determinism."""

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from scrapy_whittle.feeds.parse import parse_feed
from sim.web.feedweb import FeedWeb
from sim.web.scenarios import make_scenario
from tests.scrapy.conftest import ROOT


def get(url, headers=None):
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_opml_params_and_feeds(sim_server):
    status, _, body = get(f"{sim_server.url}/feeds.opml")
    urls = [o.get("xmlUrl") for o in ET.fromstring(body).iter("outline")]
    assert status == 200 and len(urls) == 20
    params = json.loads(get(f"{sim_server.url}/params.json")[2])
    assert params["time_unit"] == "second" and len(params["sources"]) == 20
    assert params["sources"][0]["url"].endswith("/feed/0.xml")
    kinds = set()
    for i in (0, 1):
        status, headers, body = get(f"{sim_server.url}/feed/{i}.xml")
        feed = parse_feed(body, url="x", now=1e12)
        kinds.add(feed.kind[:3])
        assert status == 200 and "ETag" in headers
        assert all(e.engagement is not None for e in feed.entries)
    assert kinds == {"rss", "ato"}


def test_conditional_get(sim_server):
    url = f"{sim_server.url}/feed/5.xml"
    _, headers, _ = get(url)
    status, _, body = get(url, {"If-None-Match": headers["ETag"]})
    assert status in (200, 304)          # 200 only if an item arrived in between
    assert status == 200 or body == b""
    assert get(url, {"If-None-Match": '"nope"'})[0] == 200


def test_feedweb_same_items_whatever_the_fetch_pattern():
    params = make_scenario("news-mix", n=5, seed=0).params
    a, b = FeedWeb(params, seed=4), FeedWeb(params, seed=4)
    for t in (1.0, 2.5, 7.0):
        a.fetch(2, t)
    b.fetch(0, 3.0)
    assert [(it.seq, it.published, it.base) for it in a.feed(2, 7.0)] == \
        [(it.seq, it.published, it.base) for it in b.feed(2, 7.0)]
    assert a.totals()["fetches"] == 3


def test_feedweb_user_measures_are_the_delays_and_losses_of_the_items_since_time_0():
    params = make_scenario("news-mix", n=3, seed=0).params
    web, twin = FeedWeb(params, seed=2, window=3, start="warm"), FeedWeb(params, seed=2,
                                                                        window=3, start="warm")
    expected = []
    last = -np.inf
    for t in (4.0, 9.0, 30.0):
        shown = twin.feed(0, t)
        expected += [t - it.published for it in shown if it.published > last
                     and it.published >= 0]
        last = t
        web.fetch(0, t)
    measures = web.user_measures(40.0)
    assert expected and measures["delayed_items"] == len(expected)
    assert measures["median_delay"] == pytest.approx(np.median(expected))
    assert measures["mean_delay"] == pytest.approx(np.mean(expected))
    # source 1 never fetched: all but its window's last three since time 0 are lost
    since_start = twin.latest_seq(1, 40.0) + 1 - 3
    assert since_start > 3
    assert int(web.missed_items[1]) == since_start - 3
    assert measures["missed_items"] == int(web.missed_items.sum())


SOONER = re.compile(r"entries found (\d+) minutes (sooner|later) \(median discovery delay "
                    r"(\d+) min against (\d+)\) than polling every feed in turn, (\d+) "
                    r"(fewer|more) missed \((\d+) against (\d+)\)")


@pytest.mark.slow
def test_example_project_runs():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "scrapy", "crawl", "news", "-s", "CLOSESPIDER_TIMEOUT=4",
         "-s", "FEEDS={}", "-s", "SIM_SOURCES=50", "-s", "TELNETCONSOLE_ENABLED=False"],
        cwd=ROOT / "example_project", env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Whittle summary" in proc.stderr and "round_robin =" in proc.stderr
    assert "] ERROR:" not in proc.stderr, proc.stderr[-3000:]
    # the gain against round-robin in the user's terms: consistent numbers
    found = SOONER.search(proc.stderr)
    assert found, proc.stderr[-3000:]
    gap, sooner, ours, theirs, fewer_n, fewer, missed, rr_missed = found.groups()
    hours = int(re.search(r"in (\d+) simulated hours", proc.stderr).group(1))
    assert 0 < int(ours) <= 60 * (hours + 1) and 0 < int(theirs) <= 60 * (hours + 1)
    gain = int(theirs) - int(ours)
    assert abs(abs(gain) - int(gap)) <= 1 and (sooner == "sooner") == (gain >= 0)
    lost = int(rr_missed) - int(missed)
    assert abs(lost) == int(fewer_n) and (fewer == "fewer") == (lost >= 0)
    truth = re.search(r"\((\d+) items, (\d+) missed\)", proc.stderr)
    assert int(truth.group(2)) == int(missed)
