"""A state file of schema 1 (other policy names) is read, and upgraded, with today's names."""

from __future__ import annotations

import sqlite3

from scrapy_whittle.report.data import ReadOnlyStore
from scrapy_whittle.service.state_codec import decode, encode
from scrapy_whittle.service.store import SCHEMA_VERSION, StateStore


def _schema_1_file(path, policy: str) -> None:
    StateStore(path).close()
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE meta SET value = 1 WHERE key = 'schema_version'")
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
        store = StateStore(path)                         # for writing: upgraded in place
        assert store.schema_version == SCHEMA_VERSION
        saved = store.load()
        assert saved.meta["policy"] == new and decode(saved.policy[2])["policy"] == new
        store.close()
        store = StateStore(path)                         # and not translated a second time
        assert store.load().meta["policy"] == new
        store.close()
