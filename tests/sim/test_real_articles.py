"""sim.bench.real_articles: the benchmark's shingle metric on hand-made texts, and the real-page
mode of sim.bench.articles end to end through the crawl (its report's figures consistent with one
another; no threshold on their quality)."""

from __future__ import annotations

import gzip
import json

import pytest

from sim.bench import articles
from sim.bench.real_articles import DATA, Score, load, rss, score, shingles, summary


def test_shingles_are_four_tokens_of_word_characters_case_kept_counted_with_repeats():
    assert shingles("Don't stop me now!") == {("Don", "t", "stop", "me"): 1,
                                              ("t", "stop", "me", "now"): 1}
    assert shingles("w x y z w x y z")[("w", "x", "y", "z")] == 2
    assert shingles("Hello, world") == {("Hello", "world"): 1}     # fewer tokens: one shingle
    assert shingles("") == {} and shingles(None) == {}


def test_score_of_hand_made_texts():
    truth = "a b c d e"                                   # shingles abcd, bcde
    assert score(truth, truth) == Score(1.0, 1.0)
    assert score(truth + " x", truth) == Score(2 / 3, 1.0)     # one extra shingle, cdex
    assert score(truth + " x", truth).f1 == pytest.approx(0.8)
    assert score("w x y z", "w x y z w x y z") == Score(1.0, 1 / 5)   # 1 of its 5 (wxyz twice)
    assert score("w x y z", "w x y z w x y z").f1 == pytest.approx(1 / 3)
    assert score("hello world", "Hello world") == Score(0.0, 0.0)    # case counts
    assert score(None, truth) == Score(None, 0.0)         # nothing extracted: no precision
    assert score("", truth).f1 == 0.0


def test_summary_averages_precision_and_recall_then_takes_their_harmonic_mean():
    s = summary([Score(1.0, 1.0), Score(None, 0.0), Score(0.5, 1.0)])
    assert s["precision"] == pytest.approx(3 / 4)         # the page without text left out
    assert s["recall"] == pytest.approx(2 / 3)
    assert s["f1"] == pytest.approx(12 / 17)
    assert s["f1_pages"] == pytest.approx((1 + 0 + 2 / 3) / 3)
    assert s["pages"] == 3


def test_the_data_are_the_benchmark_s_files_with_their_labels():
    truth = json.loads((DATA / "ground_truth.json").read_text(encoding="utf-8"))
    files = sorted(p.name.removesuffix(".html.gz") for p in DATA.glob("*.html.gz"))
    assert files == sorted(truth) and len(files) == 40
    assert (DATA / "LICENSE").read_text().startswith("MIT License")
    page = load(1)[0]
    assert page.html == gzip.decompress((DATA / f"{page.id}.html.gz").read_bytes())
    assert page.truth == truth[page.id]["articleBody"] and page.truth
    feed = rss("http://h", 0, load(3)).decode()
    assert all(f"<link>http://h/page/{p.id}</link>" in feed for p in load(3))


def test_the_real_page_mode_crawls_the_pages_and_reports_consistent_figures(capsys):
    assert articles.main(["--real", "--pages", "5", "--per-feed", "2", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["pages"] == 5 and r["feeds"] == 3
    assert r["items"] == 5                         # every linked page's entry gave its item
    assert 0.0 <= r["share_with_text"] <= 1.0
    assert r["share_with_text"] == r["with_text"] / r["pages"]
    rows = r["per_page"]
    assert [row["id"] for row in rows] == [p.id for p in load(5)]
    for kind in ("crawl", "direct", "trafilatura"):
        s = r[kind]
        assert 0.0 <= s["precision"] <= 1.0 and 0.0 <= s["recall"] <= 1.0
        assert s["f1"] == pytest.approx(2 * s["precision"] * s["recall"]
                                        / (s["precision"] + s["recall"]))
        assert s["f1_pages"] == pytest.approx(sum(row[kind]["f1"] for row in rows) / 5)
    intact = [row for row in rows if row["intact"] and row["with_text"]]
    assert intact                                  # the comparison below is not vacuous
    assert r["intact"] == sum(row["intact"] for row in rows)
    for row in intact:                             # the crawl adds nothing to the extractor
        assert row["crawl"] == row["direct"]
    for row in rows:
        if not row["with_text"]:
            assert row["crawl"]["precision"] is None and row["crawl"]["f1"] == 0.0
