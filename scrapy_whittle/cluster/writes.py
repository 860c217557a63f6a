"""Write commands on a crawl's keys run as one atomic step: a Lua script that runs them in
turn, in place of a ``MULTI`` / ``EXEC`` transaction.

Both are atomic and one round trip. On a Redis Cluster, redis-py's asyncio transaction runs
every command it queues in a thread of its own with an event loop of its own (to find its
slot: ``TransactionStrategy.execute_command``), some 0.2 ms of CPU a command: a dispatch of
100 tasks cost 20 ms. A script call costs what it costs on one Redis, whose transactions it
replaces too (one mechanism; cheaper there as well: no ``QUEUED`` reply per command).

Each command names one key (its first argument), given to the script in ``KEYS`` (so that a
Redis Cluster routes the call, and every key of a crawl is in one slot); the replies are not
returned (none of the callers reads them). A command that fails (a key of the wrong type)
ends the script there: the commands before it stay done, as in a transaction, and those
after it are not run (a transaction would run them).
"""

from __future__ import annotations

#: ARGV: per command, the count n of its arguments after the key, its name, the place of its
#: key in KEYS, then its n arguments
RUN = """
local i = 1
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  local command = {ARGV[i + 1], KEYS[tonumber(ARGV[i + 2])]}
  for j = 1, n do command[j + 2] = ARGV[i + 2 + j] end
  redis.call(unpack(command))
  i = i + 3 + n
end
return 0
"""

#: fields a command may carry at most (Lua's ``unpack`` has a limit): a longer one is split
MAX_ARGS = 1000


class Writes:
    """Commands to run at once (``add``), then ``await writes.run(script)`` with ``script``
    the client's ``register_script(RUN)``."""

    def __init__(self) -> None:
        self.keys: dict[str, int] = {}
        self.args: list = []

    def add(self, name: str, key: str, *args) -> Writes:
        place = self.keys.setdefault(key, len(self.keys) + 1)
        self.args += [len(args), name, place, *args]
        return self

    def xadd(self, stream: str, fields: dict) -> Writes:
        return self.add("XADD", stream, "*", *_flat(fields))

    def hset(self, key: str, mapping: dict) -> Writes:
        return self.variadic("HSET", key, _flat(mapping))

    def variadic(self, name: str, key: str, items: list) -> Writes:
        """``name key item...`` (HSET's pairs, HDEL's fields, ZREM's members), split into
        commands of at most ``MAX_ARGS`` items."""
        for at in range(0, len(items), MAX_ARGS):
            self.add(name, key, *items[at:at + MAX_ARGS])
        return self

    def __bool__(self) -> bool:
        return bool(self.args)

    async def run(self, script) -> None:
        await script(keys=list(self.keys), args=self.args)


def _flat(mapping: dict) -> list:
    return [x for pair in mapping.items() for x in pair]
