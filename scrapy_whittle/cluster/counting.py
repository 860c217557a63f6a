"""Round trips to Redis, counted where they happen: each request a connection writes.

A command, a pipeline (transaction or not) and a script call are each one write of the
connection followed by reading its replies: one round trip however many commands it
carries. :func:`count_round_trips` makes a client's pool create connections that count their
writes into a :class:`RoundTrips`; the node publishes the count in its stats
(``whittle/cluster/round_trips``), which ``sim.bench_cluster`` divides by the crawls. The
connection's health checks (a PING) are round trips too, and counted.
"""

from __future__ import annotations

import inspect


class RoundTrips:
    """The round trips of one process's clients."""

    def __init__(self) -> None:
        self.count = 0


def count_round_trips(client, counter: RoundTrips):
    """Make ``client``'s pool (``redis`` or ``redis.asyncio``) count each request its
    connections write into ``counter``; returns ``client``."""
    pool = client.connection_pool
    base = pool.connection_class
    send = base.send_packed_command

    if inspect.iscoroutinefunction(send):
        async def send_packed_command(self, command, check_health=True):
            counter.count += 1
            return await send(self, command, check_health=check_health)
    else:
        def send_packed_command(self, command, check_health=True):
            counter.count += 1
            return send(self, command, check_health=check_health)

    pool.connection_class = type(f"Counting{base.__name__}", (base,),
                                 {"send_packed_command": send_packed_command})
    return client

