"""The Redis keys of one crawl, all under one prefix (``WHITTLE_REDIS_PREFIX``)."""

from __future__ import annotations

from dataclasses import dataclass

#: sources per chunk of packed per-source records (a chunk is allocated whole when first
#: written, so Redis keeps no growth slack in it), and per hash of entry memories / ETags
CHUNK = 512
BUCKET = 64


@dataclass(frozen=True)
class Keys:
    prefix: str

    def _k(self, name: str) -> str:
        return f"{self.prefix}:{name}"

    @property
    def planner(self) -> str:        # the planner's lock: a token with a time-to-live
        return self._k("planner")

    @property
    def meta(self) -> str:           # hash: origin, period, budget, policy, layout, ...
        return self._k("meta")

    @property
    def urls(self) -> str:           # list: URL of source id i at index i
        return self._k("urls")

    @property
    def aliases(self) -> str:        # hash: a moved source's old URL -> its id
        return self._k("aliases")

    def alive(self, sid: int) -> str:  # string: CHUNK doubles, each source's last new entry
        return self._k(f"alive:{sid // CHUNK}")

    @property
    def hosts(self) -> str:          # hash: a throttled host -> its allowance (JSON)
        return self._k("hosts")

    @property
    def categories(self) -> str:     # hash: id -> category (sources that have one)
        return self._k("categories")

    def rows(self, sid: int) -> str:  # string: packed records of CHUNK sources
        return self._k(f"rows:{sid // CHUNK}")

    def etags(self, sid: int) -> str:  # hash: id -> ETag, BUCKET sources a hash
        return self._k(f"etag:{sid // BUCKET}")

    def entries(self, sid: int) -> str:  # hash: id -> entry hashes, BUCKET sources a hash
        return self._k(f"entries:{sid // BUCKET}")

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
    def pending(self) -> str:        # hash: batch id -> a Batch's JSON line, not delivered
        return self._k("pending")

    @property
    def pending_since(self) -> str:  # sorted set: batch id -> when its holder last renewed it
        return self._k("pending:since")

    @property
    def pending_next(self) -> str:   # counter: the last batch id given
        return self._k("pending:next")
