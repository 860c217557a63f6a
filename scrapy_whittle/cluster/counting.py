"""Round trips to Redis, counted where they happen: each request a connection writes.

A command, a pipeline (transaction or not) and a script call are each one write of the
connection followed by reading its replies: one round trip however many commands it
carries. :func:`count_round_trips` makes a client's pool create connections that count their
writes into a :class:`RoundTrips`; the node publishes the count in its stats
(``whittle/cluster/round_trips``), which ``sim.bench.cluster`` divides by the crawls. The
connection's health checks (a PING) are round trips too, and counted.
"""

from __future__ import annotations

import inspect


class RoundTrips:
    """The round trips of one process's clients."""

    def __init__(self) -> None:
        self.count = 0


def count_round_trips(client, counter: RoundTrips):
    """Make ``client`` (``redis`` or ``redis.asyncio``, one server or a Redis Cluster) count
    each request its connections write into ``counter``; returns ``client``."""
    return with_connection_class(client, lambda base: counting_class(base, counter))


def with_connection_class(client, wrap):
    """Make ``client``'s connections of the class ``wrap(their class)``; returns ``client``.
    A cluster client's connections to each node too, and those of nodes it finds later
    (the cluster clients keep no public hook for it: their nodes' connection class)."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        pool.connection_class = wrap(pool.connection_class)
        return client
    manager = client.nodes_manager
    kwargs = manager.connection_kwargs
    if "connection_class" in kwargs:                      # redis.asyncio's ClusterNode
        kwargs["connection_class"] = wrap(kwargs["connection_class"])
    for node in list(manager.startup_nodes.values()) + list(manager.nodes_cache.values()):
        if getattr(node, "redis_connection", None) is not None:     # redis's: a Redis
            with_connection_class(node.redis_connection, wrap)
            # made at once by the client's start (the cluster's slots asked): made again
            pool = node.redis_connection.connection_pool
            pool.disconnect()
            pool.reset()
        elif hasattr(node, "connection_class"):
            node.connection_class = wrap(node.connection_class)
    return client


def counting_class(base: type, counter: RoundTrips) -> type:
    """``base`` (a connection class) whose requests are counted into ``counter``."""
    if getattr(base, "_counting", False):
        return base
    send = base.send_packed_command

    if inspect.iscoroutinefunction(send):
        async def send_packed_command(self, command, check_health=True):
            counter.count += 1
            return await send(self, command, check_health=check_health)
    else:
        def send_packed_command(self, command, check_health=True):
            counter.count += 1
            return send(self, command, check_health=check_health)

    return type(f"Counting{base.__name__}", (base,),
                {"send_packed_command": send_packed_command, "_counting": True})

