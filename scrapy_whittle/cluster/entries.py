"""The entry memory of a cluster: which entries of each source were already seen, in Redis.

The same memory as :mod:`scrapy_whittle.service.memory.entry_memory` (64-bit XXH3 hashes of entry
keys, oldest first, capacity following the feed plus an eighth), kept per source in a string of
``BUCKET`` sources (``Keys.entries``, under the source's tag): a header of each source's record
length (4 bytes each), then the records, each a 4-byte capacity (and the room lent, below) and the
packed hashes.

A WebSub delivery forgets nothing the record holds (as ``EntryMemory.pushed``): it may carry
only the feed's new entries, no view of the feed, and forgetting the least recently seen for
them would drop entries a feed listed oldest first still shows, which its next poll would
report new again. The record grows instead, and the room it took is *lent* until the source's
next fetch, which gives it back (the capacity back to the larger of what it was before the
loans and what the fetch's rule asks, the least recently seen forgotten). The room lent is a
second 4-byte word after the capacity, present only while some is lent: a record of 8 + 8k
bytes has it, one of 4 + 8k bytes (every record written before loans existed) has nothing
lent. So a record costs nothing more while nothing is lent, and grows only until the next
fetch (a source that is only ever pushed grows up to ``max_entries_per_source``, as in one
process); splitting the capacity's word would leave too few bits for capacities and loans up
to the bound, and a word always there would cost 4 bytes a source.

A fetch is told in two steps, each a Lua script on the keys of one hash tag (a Redis Cluster
runs a script on one slot only; :mod:`scrapy_whittle.cluster.keys`):

1. :data:`ENTRIES`, under the source's tag: which of the fetch's entries are new to the feed,
   remembered atomically (two workers can never both take an entry for new), and, given the
   entries themselves (:func:`entry_args`), the new ones stored as a *pending batch* in the same
   step. It returns how many entries the source had remembered before (a window is full only when
   there were some: :func:`~scrapy_whittle.service.decisions.outcomes.judge_fetch`), a flag per
   entry shown ("1": new to the feed; "0": seen; "-": the same entry shown earlier in the fetch),
   the batch's id (0: none) and the change of the feed's capacity. A delivery is
   told by the same script (:data:`PUSH_ENTRIES`), then reported as a fetch is.
2. :data:`REPORT`, under the crawl's prefix: the task acknowledged, the stories of the entries
   new to their feed told ("2": a story the crawl has already, with ``WHITTLE_DEDUP =
   "link"``: :mod:`scrapy_whittle.cluster.stories`), the capacity counter
   (``Keys.entry_capacity``) kept, and the fetch's result added to the results stream
   (:mod:`scrapy_whittle.cluster.tasks`' message, judged as
   :func:`~scrapy_whittle.service.decisions.outcomes.judge_fetch` does: the new entries' count,
   values summed, publication times; the window full when every entry shown was new to the feed).
   It returns 1 and the flags, or 0 when the task was acknowledged already: a retry whose
   first reply was lost, or a task the planner took back from a slow worker; then nothing
   changes, and the worker emits nothing of the fetch (its batch is left to be reclaimed).
   A WebSub delivery's report names no task: its result, kind ``push``, is added alone.

So an entry is never remembered as seen without being pending (step 1), and the result is sent
once (step 2). A worker that dies between the two leaves its batch pending (replayed after a
lease, its stories not told: a story another feed brought may then be an item twice, across
that crash only) and its task unanswered (handed out again after its lease; the entries are
seen then, and the fetch's reward is not learnt).

At-least-once items (:mod:`scrapy_whittle.service.state.deliveries` does it for one process with a
file journal): a pending batch is a field of ``Keys.pending(tag)`` (id -> a
:class:`~scrapy_whittle.service.state.deliveries.Batch`'s JSON line) and a member of
``Keys.pending_since(tag)`` (id -> Redis's time when stored or last renewed); its id is
``n * SPREAD + tag``, ``n`` from the tag's counter ``Keys.pending_next(tag)``: unique across
the cluster, and telling its tag. A worker killed, or a reply lost to a dropped connection,
leaves its batch in Redis. The worker deletes it once its items passed the pipelines, and
renews it while they have not (:data:`RENEW`); a batch nobody renewed for a lease is taken by
a live worker (:data:`RECLAIM`), which hands it to its spider again. Times are Redis's
(``TIME``, of the shard holding the tag): the processes' clocks may differ.
"""

from __future__ import annotations

import json

import xxhash

from scrapy_whittle.cluster.keys import BUCKET, SPREAD
from scrapy_whittle.cluster.stories import STORY_LUA
from scrapy_whittle.feeds.parse import FeedEntry

#: :data:`ENTRIES`'s ARGV[6]: the entries a fetch showed (a view of the feed), or a WebSub
#: delivery's (maybe only the new ones)
FETCH_ENTRIES, PUSH_ENTRIES = "fetch", "push"

#: KEYS: the source's entry string, ``pending``, ``pending:since``, ``pending:next`` (of its
#: tag); ARGV: [1] the source's place in the string, [2] ``max_entries_per_source``, [3] the
#: least slack, [4] the packed hashes, [5] the tag, [6] :data:`FETCH_ENTRIES` or
#: :data:`PUSH_ENTRIES`, then :func:`entry_args`'s (none: no batch)
ENTRIES = f"""
local slot = tonumber(ARGV[1])
local head = redis.call('GETRANGE', KEYS[1], 0, {4 * BUCKET - 1})
local pos, len = {4 * BUCKET + 1}, 0
if #head == {4 * BUCKET} then
  for i = 0, slot - 1 do pos = pos + struct.unpack('<I4', head, 4 * i + 1) end
  len = struct.unpack('<I4', head, 4 * slot + 1)
else
  head = nil
end
local old = len > 0 and redis.call('GETRANGE', KEYS[1], pos - 1, pos + len - 2) or nil
local maxn = tonumber(ARGV[2])
local cap, lent, known, oldlist = 0, 0, {{}}, {{}}
if old then
  cap = struct.unpack('<I4', old)
  local at = 5
  if #old % 8 == 0 then     -- 8 + 8k bytes: a second word, the room deliveries lent
    lent = struct.unpack('<I4', old, 5)
    at = 9
  end
  for i = at, #old - 7, 8 do
    local h = string.sub(old, i, i + 7)
    oldlist[#oldlist + 1] = h
    known[h] = true
  end
end
local shown = ARGV[4]
local n = math.min(math.floor(#shown / 8), maxn)
local flags, seen, vis, fresh = {{}}, {{}}, {{}}, 0
for i = 1, n do
  local h = string.sub(shown, (i - 1) * 8 + 1, i * 8)
  if seen[h] then
    flags[i] = '-'
  else
    seen[h] = true
    vis[#vis + 1] = h
    if known[h] then flags[i] = '0' else flags[i] = '1'; fresh = fresh + 1 end
  end
end
local visible = #vis
local had = cap
local rule = math.min(visible + math.max(tonumber(ARGV[3]), math.floor(visible / 8)), maxn)
if ARGV[6] == '{PUSH_ENTRIES}' then
  -- a delivery is no view of the feed (it may carry only the new entries): the record grows
  -- to hold all it held and the new ones, forgetting nothing; the growth is lent
  local want = math.min(#oldlist + fresh, maxn)
  if want > cap then
    lent = lent + want - cap
    cap = want
  end
  cap = math.min(math.max(cap, rule), maxn)
else
  -- a fetch shows what the feed lists: the room lent goes back, down to the rule's size
  cap = math.min(math.max(cap, rule), maxn)
  if lent > 0 then
    cap = math.max(cap - lent, rule)
    lent = 0
  end
end
local out = {{}}
for _, h in ipairs(oldlist) do
  if not seen[h] then out[#out + 1] = h end
end
for i = #vis, 1, -1 do out[#out + 1] = vis[i] end
local first = math.max(1, #out - cap + 1)
local rec = struct.pack('<I4', cap) .. (lent > 0 and struct.pack('<I4', lent) or '') ..
            table.concat(out, '', first, #out)
if head and #rec == len then
  redis.call('SETRANGE', KEYS[1], pos - 1, rec)
else
  -- the string rewritten: the header with the record's new length, the others as they were
  local s = head and redis.call('GET', KEYS[1]) or string.rep('\\0', {4 * BUCKET})
  local h = string.sub(s, 1, 4 * slot) .. struct.pack('<I4', #rec) ..
            string.sub(s, 4 * slot + 5, {4 * BUCKET})
  redis.call('SET', KEYS[1], h .. string.sub(s, {4 * BUCKET + 1}, pos - 1) .. rec ..
             string.sub(s, pos + len))
end
local batch = 0
if #ARGV > 9 then
  -- ARGV[7..9]: the source's URL (JSON), id, the time found; then per entry shown its JSON
  -- record and value: the new ones are the pending batch
  local es, vs = {{}}, {{}}
  for i = 1, n do
    if flags[i] == '1' and ARGV[9 + 2 * i] then
      es[#es + 1] = ARGV[8 + 2 * i]
      vs[#vs + 1] = ARGV[9 + 2 * i]
    end
  end
  if #es > 0 then
    batch = redis.call('INCR', KEYS[4]) * {SPREAD} + tonumber(ARGV[5])
    redis.call('HSET', KEYS[2], batch, '{{"b":' .. batch .. ',"u":' .. ARGV[7] .. ',"s":' ..
               ARGV[8] .. ',"t":' .. ARGV[9] .. ',"v":[' .. table.concat(vs, ',') ..
               '],"e":[' .. table.concat(es, ',') .. ']}}')
    local t = redis.call('TIME')
    redis.call('ZADD', KEYS[3], tonumber(t[1]) + tonumber(t[2]) / 1000000, batch)
  end
end
return {{#oldlist, table.concat(flags), batch, cap - had}}
"""

#: KEYS: ``entries:capacity``, the story shards (:func:`~scrapy_whittle.cluster.stories.
#: story_args`), then (with a report) the results and tasks streams; ARGV: :data:`ENTRIES`'s
#: flags, the stories ("": per feed), the report (:func:`report_arg`; "": none), the change
#: of the capacity, how many entries the feed had remembered
REPORT = """
local r = nil
if #ARGV[3] > 0 then
  -- ARGV[3] is report_arg's JSON (t: the task's id, f: the result's other fields, v and p:
  -- each entry shown's value and publication time); KEYS[#KEYS - 1], KEYS[#KEYS]: the
  -- results and tasks streams. A task acknowledged already was reported already.
  r = cjson.decode(ARGV[3])
  if r.t ~= '' then      -- a WebSub delivery's report answers no task
    if redis.call('XACK', KEYS[#KEYS], 'workers', r.t) == 0 then return {0, ''} end
    redis.call('XDEL', KEYS[#KEYS], r.t)
  end
end
local shownflags = ARGV[1]
local n = #shownflags
local flags, at = {}, {}
for i = 1, n do
  local c = string.sub(shownflags, i, i)
  if c ~= '-' then
    flags[#flags + 1] = c
    at[#flags] = i
  end
end
local vis = flags
local delta = tonumber(ARGV[4])
if delta ~= 0 then redis.call('INCRBY', KEYS[1], delta) end
""" + STORY_LUA + """
if r then
  local newn, repeats, reward, pub = 0, 0, 0, {}
  for j = 1, #flags do
    if flags[j] == '1' then
      newn = newn + 1
      reward = reward + tonumber(r.v[at[j]])
      pub[#pub + 1] = r.p[at[j]]
    elseif flags[j] == '2' then
      repeats = repeats + 1
    end
  end
  local full = (tonumber(ARGV[5]) > 0 and #flags > 0 and newn + repeats == #flags) and '1'
               or '0'
  local f = r.f
  for _, x in ipairs({'new', tostring(newn), 'reward', string.format('%.17g', reward),
                      'full', full, 'published', '[' .. table.concat(pub, ',') .. ']'}) do
    f[#f + 1] = x
  end
  redis.call('XADD', KEYS[#KEYS - 1], '*', unpack(f))
end
return {1, table.concat(flags)}
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
    """:data:`REPORT`'s report (ARGV[3]): the task to acknowledge, the result's fields but
    those the script fills in (:func:`~scrapy_whittle.cluster.tasks.report_fields`), and per
    entry shown (as :func:`packed_hashes` gives them) its value and publication time
    (exact: as text)."""
    flat = [str(x) for kv in fields.items() for x in kv]
    return json.dumps({"t": task_id, "f": flat, "v": [repr(float(v)) for v in values],
                       "p": [json.dumps(e.published) for e in entries]},
                      ensure_ascii=False, separators=(",", ":"))


def entry_args(url: str, source: int, found_at: float, entries: list[FeedEntry],
               values: list[float]) -> list:
    """The arguments after the tag that make :data:`ENTRIES` store the new ones of
    ``entries`` (the distinct ones, as :func:`packed_hashes` gives them; ``values``: theirs)
    as a pending batch, in :class:`~scrapy_whittle.service.state.deliveries.Batch`'s line format."""
    def dump(x) -> str:
        return json.dumps(x, ensure_ascii=False, separators=(",", ":"))

    args: list = [dump(url), int(source), dump(float(found_at))]
    for e, v in zip(entries, values, strict=True):
        args += [dump([e.key, e.title, e.link, e.published, e.engagement]), dump(float(v))]
    return args
