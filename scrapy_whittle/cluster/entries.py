"""The entry memory of a cluster: which entries of each source were already seen, in Redis.

The same memory as :mod:`scrapy_whittle.service.entry_memory` (64-bit XXH3 hashes of entry keys,
oldest first, capacity following the feed plus an eighth), kept per source in a field of a
small hash (``Keys.entries``) as a 4-byte capacity and the packed hashes. One Lua script
tells which of a fetch's entries are new and remembers them, atomically: two workers can
never both take an entry for new, so an entry is emitted once across the cluster. It returns
how many entries the source had remembered before (a window is full only when there were
some: :func:`~scrapy_whittle.service.outcomes.judge_fetch`) and a flag per distinct entry
shown ("1": new; "2": new to its feed but a story the crawl has already, with
``WHITTLE_DEDUP = "link"``: :mod:`scrapy_whittle.cluster.stories`, in the same step), at most
``max_entries_per_source`` of them. It keeps the sum of the sources' capacities in
``Keys.entry_capacity`` (the story memory's bound follows it).

KEYS: the source's entry hash, ``pending``, ``pending:since``, ``pending:next``,
``entries:capacity``, then the story shards (:func:`~scrapy_whittle.cluster.stories.story_args`),
then (with a report) the results and tasks streams;
ARGV: the source's field, ``max_entries_per_source``, the least slack, the packed hashes, the
stories ("": per feed), the report (:func:`report_arg`; "": none), then :func:`entry_args`'s.

Given the report, the same step adds what the fetch showed to the results stream and
acknowledges the task (a WebSub delivery's report names none: its result, kind ``push``, is
added alone) (:mod:`scrapy_whittle.cluster.tasks`' message, judged as
:func:`~scrapy_whittle.service.outcomes.judge_fetch` does: the new entries' count, values
summed, publication times; the window full when every entry shown was new to the feed):
a fetch is one round trip, and an entry is never remembered without its result sent.

At-least-once items (:mod:`scrapy_whittle.service.deliveries` does it for one process with a
file journal): given the entries themselves too (:func:`entry_args`), the same script stores
the fetch's new ones as a *pending batch* (``Keys.pending``: id -> a
:class:`~scrapy_whittle.service.deliveries.Batch`'s JSON line; ``Keys.pending_since``: id ->
Redis's time when stored or last renewed; the id from the counter ``Keys.pending_next``,
unique across the cluster) and returns its id (0: no new entry). An entry is thus never
remembered as seen without being pending in the same step: a worker killed, or a reply lost
to a dropped connection, leaves its batch in Redis. The worker deletes it once its items
passed the pipelines, and renews it while they have not (:data:`RENEW`); a batch nobody
renewed for a lease is taken by a live worker (:data:`RECLAIM`), which hands it to its
spider again. Times are Redis's (``TIME``): the processes' clocks may differ.
"""

from __future__ import annotations

import json

import xxhash

from scrapy_whittle.cluster.stories import STORY_LUA
from scrapy_whittle.feeds.parse import FeedEntry

DEDUPE = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
local maxn = tonumber(ARGV[2])
local cap, known, oldlist = 0, {}, {}
if old then
  cap = struct.unpack('<I4', old)
  for i = 5, #old - 7, 8 do
    local h = string.sub(old, i, i + 7)
    oldlist[#oldlist + 1] = h
    known[h] = true
  end
end
local shown = ARGV[4]
local n = math.min(math.floor(#shown / 8), maxn)
local flags, seen, vis, at = {}, {}, {}, {}
for i = 1, n do
  local h = string.sub(shown, (i - 1) * 8 + 1, i * 8)
  if not seen[h] then
    seen[h] = true
    vis[#vis + 1] = h
    at[#vis] = i
    flags[#flags + 1] = known[h] and '0' or '1'
  end
end
local visible = #vis
local had = cap
cap = math.min(math.max(cap, visible + math.max(tonumber(ARGV[3]), math.floor(visible / 8))), maxn)
if cap ~= had then redis.call('INCRBY', KEYS[5], cap - had) end
local out = {}
for _, h in ipairs(oldlist) do
  if not seen[h] then out[#out + 1] = h end
end
for i = #vis, 1, -1 do out[#out + 1] = vis[i] end
local first = math.max(1, #out - cap + 1)
redis.call('HSET', KEYS[1], ARGV[1], struct.pack('<I4', cap) .. table.concat(out, '', first, #out))
""" + STORY_LUA + """
if #ARGV[6] > 0 then
  -- the fetch's result, in the same step: ARGV[6] is report_arg's JSON (t: the task's
  -- id, f: the result's other fields, v and p: each distinct entry's value and publication
  -- time); KEYS[#KEYS - 1], KEYS[#KEYS]: the results and tasks streams
  local r = cjson.decode(ARGV[6])
  local newn, repeats, reward, pub = 0, 0, 0, {}
  for j = 1, #vis do
    if flags[j] == '1' then
      newn = newn + 1
      reward = reward + tonumber(r.v[at[j]])
      pub[#pub + 1] = r.p[at[j]]
    elseif flags[j] == '2' then
      repeats = repeats + 1
    end
  end
  local full = (#oldlist > 0 and #vis > 0 and newn + repeats == #vis) and '1' or '0'
  local f = r.f
  for _, x in ipairs({'new', tostring(newn), 'reward', string.format('%.17g', reward),
                      'full', full, 'published', '[' .. table.concat(pub, ',') .. ']'}) do
    f[#f + 1] = x
  end
  redis.call('XADD', KEYS[#KEYS - 1], '*', unpack(f))
  if r.t ~= '' then      -- a push answers no task
    redis.call('XACK', KEYS[#KEYS], 'workers', r.t)
    redis.call('XDEL', KEYS[#KEYS], r.t)
  end
end
local batch = 0
if #ARGV > 9 then
  -- ARGV[7..9]: the source's URL (JSON), id, the time found; then per distinct entry shown
  -- its JSON record and value: the new ones are the pending batch
  local es, vs = {}, {}
  for j = 1, #vis do
    if flags[j] == '1' and ARGV[9 + 2 * at[j]] then
      es[#es + 1] = ARGV[8 + 2 * at[j]]
      vs[#vs + 1] = ARGV[9 + 2 * at[j]]
    end
  end
  if #es > 0 then
    batch = redis.call('INCR', KEYS[4])
    redis.call('HSET', KEYS[2], batch, '{"b":' .. batch .. ',"u":' .. ARGV[7] .. ',"s":' ..
               ARGV[8] .. ',"t":' .. ARGV[9] .. ',"v":[' .. table.concat(vs, ',') ..
               '],"e":[' .. table.concat(es, ',') .. ']}')
    local t = redis.call('TIME')
    redis.call('ZADD', KEYS[3], tonumber(t[1]) + tonumber(t[2]) / 1000000, batch)
  end
end
return {#oldlist, table.concat(flags), batch}
"""

#: renew the batches a live worker holds: KEYS = [pending_since], ARGV = batch ids
RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
for _, id in ipairs(ARGV) do
  redis.call('ZADD', KEYS[1], 'XX', now, id)
end
return #ARGV
"""

#: take up to ARGV[2] batches not renewed for ARGV[1] seconds, renewed to the caller now:
#: KEYS = [pending, pending_since]; their JSON lines (a batch delivered meanwhile is dropped)
RECLAIM = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local before = string.format('(%.6f', now - tonumber(ARGV[1]))
local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', before, 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for _, id in ipairs(ids) do
  local line = redis.call('HGET', KEYS[1], id)
  if line then
    redis.call('ZADD', KEYS[2], now, id)
    out[#out + 1] = line
  else
    redis.call('ZREM', KEYS[2], id)
  end
end
return out
"""


def packed_hashes(entries: list[FeedEntry]) -> tuple[list[FeedEntry], bytes]:
    """The distinct entries (first occurrence, feed order) and their packed hashes."""
    first: dict[str, FeedEntry] = {}
    for entry in entries:
        first.setdefault(entry.key, entry)
    h = xxhash.xxh3_64_intdigest
    raw = b"".join(h(k.encode("utf-8", "surrogatepass")).to_bytes(8, "little") for k in first)
    return list(first.values()), raw


def report_arg(task_id: str, fields: dict, values: list[float],
               entries: list[FeedEntry]) -> str:
    """:data:`DEDUPE`'s report (ARGV[6]): the task to acknowledge, the result's fields but
    those the script fills in (:func:`~scrapy_whittle.cluster.tasks.report_fields`), and per
    distinct entry (as :func:`packed_hashes` gives them) its value and publication time
    (exact: as text)."""
    flat = [str(x) for kv in fields.items() for x in kv]
    return json.dumps({"t": task_id, "f": flat, "v": [repr(float(v)) for v in values],
                       "p": [json.dumps(e.published) for e in entries]},
                      ensure_ascii=False, separators=(",", ":"))


def entry_args(url: str, source: int, found_at: float, entries: list[FeedEntry],
               values: list[float]) -> list:
    """The arguments after the packed hashes that make :data:`DEDUPE` store the new ones of
    ``entries`` (the distinct ones, as :func:`packed_hashes` gives them; ``values``: theirs)
    as a pending batch, in :class:`~scrapy_whittle.service.deliveries.Batch`'s line format."""
    def dump(x) -> str:
        return json.dumps(x, ensure_ascii=False, separators=(",", ":"))

    args: list = [dump(url), int(source), dump(float(found_at))]
    for e, v in zip(entries, values, strict=True):
        args += [dump([e.key, e.title, e.link, e.published, e.engagement]), dump(float(v))]
    return args
