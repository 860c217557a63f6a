"""Older state files: schema 1 (other policy names) is read, and upgraded, with today's names;
schema 2 (no measures, no publications) and schema 3 (no aliases, no ``alive_at``, no
stories) and schema 4 (no WebSub subscriptions) and schema 5 (no sitemap children) and
schema 6 (no sitemap indexes' last listings) and schema 7 (no article fingerprints) are upgraded
in place, what they held kept."""

from __future__ import annotations

import sqlite3

from scrapy_whittle.report.data import ReadOnlyStore
from scrapy_whittle.service.state.state_codec import decode, encode
from scrapy_whittle.service.state.store import SCHEMA_VERSION, Checkpoint, SqliteStateStore

SCHEMA_3_TABLES = ("epoch_measures", "epoch_delays", "publications")
SCHEMA_3_VIEW = """CREATE VIEW feeds AS SELECT id, url, (flags >> 33) & 1 AS left_list
                   FROM sources"""
SCHEMA_4_TABLES = ("stories", "story_sources")


def _schema_7_file(path) -> None:
    """A state file as schema 7 wrote it (no ``article_prints`` table)."""
    SqliteStateStore(path).close()
    db = sqlite3.connect(path)
    with db:
        db.execute("DROP TABLE article_prints")
        db.execute("UPDATE meta SET value = 7 WHERE key = 'schema_version'")
    db.close()


def _schema_6_file(path) -> None:
    """A state file as schema 6 wrote it (no ``sitemap_indexes`` table either)."""
    _schema_7_file(path)
    db = sqlite3.connect(path)
    with db:
        db.execute("DROP TABLE sitemap_indexes")
        db.execute("UPDATE meta SET value = 6 WHERE key = 'schema_version'")
    db.close()


def _schema_5_file(path) -> None:
    """A state file as schema 5 wrote it (no ``sitemap_children`` table either)."""
    _schema_6_file(path)
    db = sqlite3.connect(path)
    with db:
        db.execute("DROP TABLE sitemap_children")
        db.execute("UPDATE meta SET value = 5 WHERE key = 'schema_version'")
    db.close()


def _schema_4_file(path) -> None:
    """A state file as schema 4 wrote it (no ``websub`` table either)."""
    _schema_5_file(path)
    db = sqlite3.connect(path)
    with db:
        db.execute("DROP TABLE websub")
        db.execute("UPDATE meta SET value = 4 WHERE key = 'schema_version'")
    db.close()


def _old_file(path, version: int) -> None:
    """A state file as schema ``version`` (< 4) wrote it."""
    _schema_4_file(path)
    db = sqlite3.connect(path)
    with db:
        db.execute("DROP TABLE aliases")
        db.execute("DROP VIEW feeds")
        db.execute("ALTER TABLE sources DROP COLUMN alive_at")
        db.execute(SCHEMA_3_VIEW)
        for table in SCHEMA_4_TABLES + (SCHEMA_3_TABLES if version < 3 else ()):
            db.execute(f"DROP TABLE {table}")
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (version,))
    db.close()


def _tables(path) -> set[str]:
    db = sqlite3.connect(path)
    names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    db.close()
    return names


def _schema_1_file(path, policy: str) -> None:
    _old_file(path, 1)
    db = sqlite3.connect(path)
    with db:
        db.execute("INSERT INTO meta VALUES ('policy', ?)", (policy,))
        db.execute("INSERT INTO meta VALUES ('origin', 0.0)")
        db.execute("INSERT INTO policy_state VALUES (?, '[]', ?)",
                   (policy, encode({"policy": policy, "n": 0})))
    db.close()


def test_schema_1_policy_names_are_read_as_today_s(tmp_path):
    for old, new in (("adaptive-whittle", "whittle"), ("whittle", "oracle"),
                     ("round_robin", "round_robin")):
        path = tmp_path / f"{old}.sqlite"
        _schema_1_file(path, old)
        report = ReadOnlyStore(path)                     # read-only: translated, not written
        saved = report.load()
        assert saved.meta["policy"] == new and saved.policy[0] == new
        assert decode(saved.policy[2])["policy"] == new
        report.close()
        store = SqliteStateStore(path)                         # for writing: upgraded in place
        assert store.schema_version == SCHEMA_VERSION
        saved = store.load()
        assert saved.meta["policy"] == new and decode(saved.policy[2])["policy"] == new
        store.close()
        store = SqliteStateStore(path)                         # and not translated a second time
        assert store.load().meta["policy"] == new
        store.close()


def test_schema_2_is_upgraded_in_place_keeping_what_it_held(tmp_path):
    path = tmp_path / "whittle.sqlite"
    _old_file(path, 2)
    db = sqlite3.connect(path)
    with db:
        db.execute("INSERT INTO meta VALUES ('origin', 100.0)")
        db.execute("INSERT INTO epochs VALUES (0, 3, 3.0, 5, 2.5, 0, 1)")
    db.close()
    report = ReadOnlyStore(path)                          # read-only: as it is
    assert report.schema_version == 2 and report.load().epochs == [(0, 3, 3.0, 5, 2.5, 0, 1)]
    report.close()
    assert not set(SCHEMA_3_TABLES) & _tables(path)
    store = SqliteStateStore(path)
    assert store.schema_version == SCHEMA_VERSION == 8
    store.write(Checkpoint(taken_at=200.0, epochs=[(0, 1, 1.0, 2, 1.0, 0, 0)],
                           epoch_measures=[(0, 1.5, 40.0)], epoch_delays=[(0, 16, 2)],
                           publications=lambda: [(0, 150.0, None), (0, 20.0, 0.5)],
                           n_publications=1, publications_since=100.0))
    saved = store.load()
    store.close()
    assert saved.meta["origin"] == 100.0 and saved.epochs == [(0, 4, 4.0, 7, 3.5, 0, 1)]
    assert set(SCHEMA_3_TABLES + SCHEMA_4_TABLES) <= _tables(path)
    db = sqlite3.connect(path)
    assert db.execute("SELECT * FROM epoch_measures").fetchall() == [(0, 1.5, 40.0)]
    assert db.execute("SELECT * FROM epoch_delays").fetchall() == [(0, 16, 2)]
    # the publication older than the retention's start went with the checkpoint
    assert db.execute("SELECT * FROM publications").fetchall() == [(0, 150.0, None)]
    db.close()


def test_schema_3_is_upgraded_in_place_with_aliases_and_alive_at(tmp_path):
    path = tmp_path / "whittle.sqlite"
    _old_file(path, 3)
    db = sqlite3.connect(path)
    with db:
        db.execute("INSERT INTO meta VALUES ('origin', 100.0)")
        db.execute("INSERT INTO sources (id, url, flags) VALUES (0, 'http://a/feed', ?)",
                   (1 << 32,))
    db.close()
    report = ReadOnlyStore(path)                          # read-only: as it is
    saved = report.load()
    assert report.schema_version == 3 and saved.aliases == []
    assert saved.sources["alive_at"] == (None,)
    report.close()
    assert "aliases" not in _tables(path)
    store = SqliteStateStore(path)
    assert store.schema_version == SCHEMA_VERSION == 8
    store.write(Checkpoint(taken_at=200.0, moves=[(0, "http://b/feed")],
                           aliases=[("http://a/feed", 0)]))
    saved = store.load()
    store.close()
    assert saved.sources["url"] == ("http://b/feed",) and saved.sources["alive_at"] == (None,)
    assert saved.aliases == [("http://a/feed", 0)]
    db = sqlite3.connect(path)
    assert db.execute("SELECT url, left_list, retired, merged FROM feeds").fetchall() == [
        ("http://b/feed", 0, 0, 0)]
    db.close()


def test_schema_3_is_upgraded_in_place_and_keeps_stories_from_then_on(tmp_path):
    path = tmp_path / "whittle.sqlite"
    _old_file(path, 3)
    db = sqlite3.connect(path)
    with db:
        db.execute("INSERT INTO meta VALUES ('origin', 100.0)")
    db.close()
    assert not set(SCHEMA_4_TABLES) & _tables(path)
    report = ReadOnlyStore(path)                          # read-only: as it is, no stories
    assert report.schema_version == 3 and report.stories() == []
    report.close()
    store = SqliteStateStore(path)
    assert store.schema_version == SCHEMA_VERSION and store.stories() == []
    store.write(Checkpoint(taken_at=200.0, stories=[(-5, 1, 1), (7, 2, 2)],
                           story_sources=[(-5, 2)]))
    store.write(Checkpoint(taken_at=201.0, stories_gone=[(7,)], story_sources=[(-5, 3)]))
    assert sorted(store.stories()) == [(-5, 1, 1)]
    store.close()
    db = sqlite3.connect(path)
    assert db.execute("SELECT * FROM story_sources ORDER BY source").fetchall() == [
        (-5, 2), (-5, 3)]
    assert db.execute("SELECT value FROM meta WHERE key = 'origin'").fetchone() == (100.0,)
    db.close()


def test_schema_4_is_upgraded_in_place_and_keeps_websub_subscriptions_from_then_on(tmp_path):
    from scrapy_whittle.service.sources.websub import Subscriptions

    path = tmp_path / "whittle.sqlite"
    _schema_4_file(path)
    db = sqlite3.connect(path)
    with db:
        db.execute("INSERT INTO meta VALUES ('origin', 100.0)")
        db.execute("INSERT INTO sources (id, url) VALUES (0, 'http://a/feed')")
    db.close()
    assert "websub" not in _tables(path)
    report = ReadOnlyStore(path)                          # read-only: as it is, none
    assert report.schema_version == 4 and report.load().websub == []
    report.close()
    store = SqliteStateStore(path)
    assert store.schema_version == SCHEMA_VERSION == 8
    assert store.load().sources["url"] == ("http://a/feed",) and store.load().websub == []
    subs = Subscriptions("http://me.example/cb", 3600.0)
    subs.discovered(0, "http://hub.example/", "http://a/feed", 150.0)
    (request,) = subs.due(150.0)
    assert subs.verify(request.key, "subscribe", "http://a/feed", "7200", 160.0)
    store.write(Checkpoint(taken_at=200.0, websub=subs.rows()))
    store.close()
    store = SqliteStateStore(path)
    again = Subscriptions("http://me.example/cb", 3600.0)
    again.load(store.load().websub)
    store.close()
    assert again.rows() == subs.rows()
    sub = again.by_source[0]
    assert (sub.state, sub.expires_at, sub.lease_seconds) == ("active", 7360.0, 7200.0)


def test_schema_5_is_upgraded_in_place_and_keeps_sitemap_children_from_then_on(tmp_path):
    path = tmp_path / "whittle.sqlite"
    _schema_5_file(path)
    db = sqlite3.connect(path)
    with db:
        db.execute("INSERT INTO meta VALUES ('origin', 100.0)")
        db.execute("INSERT INTO sources (id, url) VALUES (0, 'http://a/index.xml')")
        db.execute("INSERT INTO sources (id, url) VALUES (1, 'http://a/news-1.xml')")
    db.close()
    assert "sitemap_children" not in _tables(path)
    report = ReadOnlyStore(path)                          # read-only: as it is, none
    assert report.schema_version == 5 and report.load().sitemap_children == []
    report.close()
    store = SqliteStateStore(path)
    assert store.schema_version == SCHEMA_VERSION == 8
    saved = store.load()
    assert saved.sources["url"] == ("http://a/index.xml", "http://a/news-1.xml")
    assert saved.sitemap_children == []
    store.write(Checkpoint(taken_at=200.0, sitemap_children=[(1, 0, 2, 150.0, 0)]))
    store.write(Checkpoint(taken_at=300.0, sitemap_children=[(1, 0, 3, 150.0, 1)]))
    store.close()
    store = SqliteStateStore(path)
    assert store.load().sitemap_children == [(1, 0, 3, 150.0, 1)]
    store.close()


def test_schema_6_is_upgraded_in_place_keeping_the_children_and_listings_from_then_on(
        tmp_path):
    path = tmp_path / "whittle.sqlite"
    _schema_6_file(path)
    db = sqlite3.connect(path)
    with db:
        db.execute("INSERT INTO meta VALUES ('origin', 100.0)")
        db.execute("INSERT INTO sources (id, url) VALUES (0, 'http://a/index.xml')")
        db.execute("INSERT INTO sources (id, url) VALUES (1, 'http://a/news-1.xml')")
        db.execute("INSERT INTO sitemap_children VALUES (1, 0, 2, 150.0, 0)")
    db.close()
    assert "sitemap_indexes" not in _tables(path)
    report = ReadOnlyStore(path)                          # read-only: as it is, none
    saved = report.load()
    assert report.schema_version == 6 and saved.sitemap_indexes == []
    assert saved.sitemap_children == [(1, 0, 2, 150.0, 0)]
    report.close()
    store = SqliteStateStore(path)
    assert store.schema_version == SCHEMA_VERSION == 8
    saved = store.load()
    assert saved.sitemap_children == [(1, 0, 2, 150.0, 0)] and saved.sitemap_indexes == []
    store.write(Checkpoint(taken_at=200.0, sitemap_indexes=[
        (0, 1, 180.0, ("http://a/news-2.xml", "http://a/é.xml"))]))
    store.write(Checkpoint(taken_at=300.0, sitemap_indexes=[(0, 1, 250.0, ("http://a/é.xml",))]))
    store.close()
    store = SqliteStateStore(path)
    saved = store.load()
    assert saved.sitemap_indexes == [(0, 1, 250.0, ("http://a/é.xml",))]
    assert saved.sitemap_children == [(1, 0, 2, 150.0, 0)]
    store.close()


def test_a_damaged_listing_row_forgets_its_awaiting_children_only(tmp_path, caplog):
    path = tmp_path / "whittle.sqlite"
    store = SqliteStateStore(path)
    store.write(Checkpoint(taken_at=200.0, meta={"origin": 100.0}, sitemap_indexes=[
        (0, 1, 180.0, ("http://a/news-2.xml",)), (3, 0, 190.0, ())]))
    store.close()
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE sitemap_indexes SET awaiting = '{garbage' WHERE parent = 0")
    db.close()
    store = SqliteStateStore(path)
    assert sorted(store.load().sitemap_indexes) == [(0, 1, 180.0, ()), (3, 0, 190.0, ())]
    store.close()
    assert "damaged sitemap index" in caplog.text


def test_schema_7_is_upgraded_in_place_keeping_article_prints_from_then_on(tmp_path):
    path = tmp_path / "whittle.sqlite"
    _schema_7_file(path)
    db = sqlite3.connect(path)
    with db:
        db.execute("INSERT INTO meta VALUES ('origin', 100.0)")
        db.execute("INSERT INTO sources (id, url) VALUES (0, 'http://a/feed')")
    db.close()
    assert "article_prints" not in _tables(path)
    report = ReadOnlyStore(path)                          # read-only: as it is, none
    assert report.schema_version == 7 and report.article_prints() == []
    report.close()
    store = SqliteStateStore(path)
    assert store.schema_version == SCHEMA_VERSION == 8 and store.article_prints() == []
    assert store.load().sources["url"] == ("http://a/feed",)
    store.write(Checkpoint(taken_at=200.0, article_prints=[(0, 0, b"\1" * 32),
                                                           (1, 0, b"\2" * 32)]))
    store.write(Checkpoint(taken_at=201.0, article_prints=[(2, 0, b"\3" * 32)],
                           article_prints_from=1))
    assert sorted(store.article_prints()) == [(1, 0, b"\2" * 32), (2, 0, b"\3" * 32)]
    store.close()
