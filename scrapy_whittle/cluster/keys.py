"""The Redis keys of one crawl, all under one prefix (``WHITTLE_REDIS_PREFIX``).

Two kinds of keys. The **crawl-wide** ones (the planner's lock, the meta, the streams, the
in-flight records, the story memory, ...) are ``<prefix>:<name>``. The **per-source** families
(records, URLs, ETags, last new entries, entry memory) and the pending batches are spread over
``SPREAD`` *tags*: source ``sid`` belongs to group ``sid // CHUNK`` and to tag
``group % SPREAD`` (:meth:`Keys.tag_of`); its keys are ``<tag prefix>:<name>``
(:meth:`Keys.tag`). On a Redis Cluster the prefix is a hash tag (``{whittle:news}``,
:func:`~scrapy_whittle.cluster.connect.key_prefix`) and each tag prefix a hash tag of its own
(``{whittle:news:t5}``): the crawl-wide keys share one slot, and each tag's keys another, so
that a script or a transaction touching one tag's keys (a fetch's entry memory with its
pending batch; a checkpoint's records of one tag) runs on one shard while the sources spread
over all of them. On one Redis the tags are plain name parts and cost nothing; a prefix that
carries its own hash tag (``{tenant}:news``) keeps every key in that tag's slot.
"""

from __future__ import annotations

from dataclasses import dataclass

#: sources per chunk of packed per-source records (a chunk is allocated whole when first
#: written, so Redis keeps no growth slack in it) and per URL list, and per string of entry
#: memories / hash of ETags
CHUNK = 512
BUCKET = 64
#: tags the per-source families spread over (a Redis Cluster's shards share them out)
SPREAD = 128
#: the layout of the keys a crawl writes (``meta``'s ``keys_layout``): a crawl written in
#: another is refused at start-up (docs/upgrading.md)
LAYOUT = 2


@dataclass(frozen=True)
class Keys:
    prefix: str

    def _k(self, name: str) -> str:
        return f"{self.prefix}:{name}"

    # -- the tags of the per-source families ----------------------------------------------------
    @staticmethod
    def tag_of(sid: int) -> int:
        """The tag of source ``sid``'s keys (and of its pending batches)."""
        return (sid // CHUNK) % SPREAD

    def tag(self, t: int) -> str:
        """The prefix of tag ``t``'s keys: a hash tag of its own where the crawl's prefix is
        one that :func:`~scrapy_whittle.cluster.connect.key_prefix` added, else a name part."""
        p = self.prefix
        if p.startswith("{") and p.endswith("}") and p.count("{") == 1 and p.count("}") == 1:
            return f"{{{p[1:-1]}:t{t}}}"
        return f"{p}:t{t}"

    def _s(self, sid: int, name: str) -> str:
        return f"{self.tag(self.tag_of(sid))}:{name}"

    # -- crawl-wide -----------------------------------------------------------------------------
    @property
    def planner(self) -> str:        # the planner's lock: a token with a time-to-live
        return self._k("planner")

    @property
    def meta(self) -> str:           # hash: origin, period, budget, policy, layout, ...
        return self._k("meta")

    @property
    def aliases(self) -> str:        # hash: a moved source's old URL -> its id
        return self._k("aliases")

    @property
    def hosts(self) -> str:          # hash: a throttled host -> its allowance (JSON)
        return self._k("hosts")

    @property
    def categories(self) -> str:     # hash: id -> category (sources that have one)
        return self._k("categories")

    @property
    def article_room(self) -> str:   # hash: host -> article requests granted, not claimed
        return self._k("article_room")

    @property
    def entry_capacity(self) -> str:  # counter: hashes all sources' entry memories may hold
        return self._k("entries:capacity")

    def stories(self, i: int) -> str:  # hash: shard -> packed story hashes, PER_KEY shards
        return self._k(f"stories:{i}")

    @property
    def blocks(self) -> str:         # hash: "<block>:<id>" -> packed sparse rows
        return self._k("blocks")

    @property
    def global_state(self) -> str:   # string: the policy's global state
        return self._k("global")

    @property
    def epochs(self) -> str:         # hash: epoch -> packed aggregates
        return self._k("epochs")

    @property
    def epoch_errors(self) -> str:   # hash: "<epoch>:<kind>" -> count
        return self._k("epoch_errors")

    @property
    def changes(self) -> str:        # stream: what each checkpoint changed (standby planners)
        return self._k("changes")

    @property
    def tasks(self) -> str:          # stream of crawls to fetch; group "workers"
        return self._k("tasks")

    @property
    def results(self) -> str:        # stream of what fetches showed; group "planner"
        return self._k("results")

    @property
    def in_flight(self) -> str:      # hash: id -> "<deadline> <task id>"
        return self._k("inflight")

    @property
    def spent(self) -> str:          # hash: epoch -> cost dispatched
        return self._k("spent")

    @property
    def totals(self) -> str:         # hash: the cluster's crawls and sources (progress lines)
        return self._k("totals")

    @property
    def inbox(self) -> str:          # list: messages to the planner (sources, delays, ...)
        return self._k("inbox")

    @property
    def crawl_delays(self) -> str:   # hash: host -> its robots.txt Crawl-delay (seconds)
        return self._k("crawl_delays")

    @property
    def websub(self) -> str:         # hash: callback key -> a WebSub subscription (JSON)
        return self._k("websub")

    def delivered(self, delivery: str) -> str:  # string: a WebSub delivery's first receipt,
        return self._k(f"delivered:{delivery}")  # expiring (cluster.websub.DELIVERY)

    # -- per source, under its tag --------------------------------------------------------------
    def urls(self, sid: int) -> str:  # list: the URLs of a chunk's sources, in id order
        return self._s(sid, f"urls:{sid // CHUNK}")

    def alive(self, sid: int) -> str:  # string: CHUNK doubles, each source's last new entry
        return self._s(sid, f"alive:{sid // CHUNK}")

    def rows(self, sid: int) -> str:  # string: packed records of CHUNK sources
        return self._s(sid, f"rows:{sid // CHUNK}")

    def etags(self, sid: int) -> str:  # hash: id -> ETag, BUCKET sources a hash
        return self._s(sid, f"etag:{sid // BUCKET}")

    def entries(self, sid: int) -> str:  # string: BUCKET sources' entry memories, packed
        return self._s(sid, f"entries:{sid // BUCKET}")

    # -- per tag --------------------------------------------------------------------------------
    def pending(self, t: int) -> str:        # hash: batch id -> a Batch's JSON line
        return f"{self.tag(t)}:pending"

    def pending_since(self, t: int) -> str:  # sorted set: batch id -> when last renewed
        return f"{self.tag(t)}:pending:since"

    def pending_next(self, t: int) -> str:   # counter: the tag's last batch number
        return f"{self.tag(t)}:pending:next"

    def checkpoint(self, t: int) -> str:     # hash: the tag's part of the last checkpoint
        return f"{self.tag(t)}:checkpoint"

    def children(self, t: int) -> str:       # hash: a child sitemap's id -> its index's
        return f"{self.tag(t)}:children"     # listing of it (the tag's children)

    def indexes(self, t: int) -> str:        # hash: a sitemap index's id -> its last
        return f"{self.tag(t)}:indexes"      # listing (the tag's indexes)


def batch_tag(batch: int) -> int:
    """The tag whose keys hold pending batch ``batch`` (ids are ``number * SPREAD + tag``)."""
    return batch % SPREAD
