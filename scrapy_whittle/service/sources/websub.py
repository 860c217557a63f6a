"""The WebSub subscriber's state, without Scrapy: subscriptions, secrets, leases, signatures.

W3C WebSub (Recommendation, 2018-01-23) in the subscriber's part:

* **discovery** (:func:`discover`): a feed names its hub and its own URL (the *topic*) in a
  ``Link`` header (``<hub>; rel="hub"``, ``<topic>; rel="self"``) or in its body (Atom's and
  RSS's ``<atom:link rel="hub">``, JSON Feed's ``hubs``); the topic is the ``self`` URL, else
  the feed's URL.
* **subscription** (:class:`Subscriptions`): one per source, with a callback URL of its own
  (the public ``WHITTLE_WEBSUB_CALLBACK`` and a random key) and a random secret (``secrets``:
  os.urandom; what the crawl *does* never depends on the values drawn). A subscription request
  (``hub.mode=subscribe``, ``hub.topic``, ``hub.callback``, ``hub.secret``,
  ``hub.lease_seconds``) is answered by the hub with 202, then the hub verifies the intent by a
  GET of the callback with ``hub.challenge``: :meth:`Subscriptions.verify` answers it only for
  a topic and mode this crawl asked for, and starts the lease the hub granted.
* **renewal**: a subscription is asked for again when a tenth of its lease is left
  (:func:`renew_at`); one whose request failed or was never verified is asked again after a
  back-off; the hub may deny (``hub.mode=denied``).
* **unsubscription**: a source that leaves the crawl, or whose feed names another hub, is
  unsubscribed (``hub.mode=unsubscribe``, verified the same way).
* **deliveries**: a POST to the callback carries the topic's new content and
  ``X-Hub-Signature: <method>=<hex HMAC of the body with the secret>``, method among sha1,
  sha256, sha384, sha512 (:func:`check_signature`); a delivery without a valid signature is
  dropped (the spec: "MUST locally ignore the message as invalid").
* **repeats**: the same delivery (same callback, same signature, so the same body) received
  again within :data:`REPEAT_WINDOW` of its first receipt is a retry of the hub or a copy
  that reached the crawl twice (:class:`RecentDeliveries`, :func:`delivery_id`): answered
  2xx, so the hub stops, and told to nobody.

The subscriptions are part of the crawl's state (:meth:`Subscriptions.rows`, the store's
``websub`` table) and are restored after a restart.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
import secrets
from collections.abc import Iterable
from dataclasses import astuple, dataclass, field, fields
from urllib.parse import urljoin

import xxhash

#: the HMAC methods a hub may sign with (WebSub 8), by the name in X-Hub-Signature
METHODS = {"sha1": hashlib.sha1, "sha256": hashlib.sha256, "sha384": hashlib.sha384,
           "sha512": hashlib.sha512}
#: what a subscriber's secret may be at most (WebSub 5.1: "less than 200 bytes")
SECRET_BYTES = 32
#: a request not answered, or not verified, within this many seconds is sent again; the wait
#: doubles with every failure in a row, up to MAX_RETRY
RETRY = 600.0
MAX_RETRY = 86400.0
#: a lease is renewed when this share of it is left
RENEW_SHARE = 0.1
#: how much of a feed's body is searched for its hub (the links are at the top)
DISCOVERY_BYTES = 16384
#: seconds (of the crawl's clock) after a delivery's first receipt during which the same
#: delivery again is a repeat, not news. What it must cover: a copy that reached two
#: processes behind one callback (milliseconds apart) and a hub's retry after it timed out
#: waiting for the answer (hubs retry within seconds to minutes, backing off). What it must
#: not cover: a document sent again later with something new in it is another body, so it
#: never falls in the window. An identical body brings no entry its first copy did not
#: (they are in the entry memory): a repeat costs only its parse, and teaches the policy
#: nothing (a push of nothing new is no evidence of the hub's health).
REPEAT_WINDOW = 600.0

SUBSCRIBE, UNSUBSCRIBE = "subscribe", "unsubscribe"
# the states of a subscription
WANTED = "wanted"          # to be asked for (new, renewal due, or retrying)
PENDING = "pending"        # asked for, the hub's verification awaited
ACTIVE = "active"          # verified, lease running
LEAVING = "leaving"        # to be unsubscribed
DENIED = "denied"          # the hub refused; asked again after a back-off


@dataclass
class Subscription:
    """One source's subscription (a row of the store's ``websub`` table)."""

    source: int
    topic: str
    hub: str
    key: str            # the callback URL's last segment
    secret: str         # hex
    state: str
    mode: str = SUBSCRIBE          # what was last asked for
    requested_at: float = -math.inf
    lease_seconds: float = math.nan
    expires_at: float = math.inf   # of the lease granted (inf: none yet)
    retry_at: float = 0.0          # when a wanted or pending one is (re)sent
    failures: int = 0

    def row(self) -> tuple:
        return tuple(None if isinstance(v, float) and not math.isfinite(v) else v
                     for v in astuple(self))

    @classmethod
    def from_row(cls, row: Iterable) -> Subscription:
        values = list(row)
        defaults = {"requested_at": -math.inf, "lease_seconds": math.nan,
                    "expires_at": math.inf, "retry_at": 0.0}
        for j, f in enumerate(fields(cls)):
            if values[j] is None:
                values[j] = defaults[f.name]
        return cls(*values)


@dataclass(frozen=True)
class HubRequest:
    """A request to send to a hub: a POST of ``form`` (application/x-www-form-urlencoded)."""

    key: str
    hub: str
    mode: str
    form: dict[str, str]


def renew_at(verified_at: float, lease_seconds: float) -> float:
    """When a lease granted at ``verified_at`` is asked for again: with a tenth of it left."""
    return verified_at + (1.0 - RENEW_SHARE) * lease_seconds


def retry_wait(failures: int) -> float:
    """The wait before asking again after ``failures`` failures in a row (>= 1)."""
    return min(MAX_RETRY, RETRY * 2.0 ** max(0, failures - 1))


def sign(secret: str, body: bytes, method: str = "sha256") -> str:
    """The ``X-Hub-Signature`` value of ``body`` (what a hub sends)."""
    return f"{method}={hmac.new(secret.encode(), body, METHODS[method]).hexdigest()}"


def check_signature(secret: str, body: bytes, header: str | None) -> bool:
    """Whether ``header`` (``X-Hub-Signature``) signs ``body`` with ``secret``: a known method
    and the HMAC, compared in constant time. A missing or malformed header is not valid."""
    if not header or "=" not in header:
        return False
    method, _, digest = header.strip().partition("=")
    algorithm = METHODS.get(method.strip().lower())
    if algorithm is None:
        return False
    expected = hmac.new(secret.encode(), body, algorithm).hexdigest()
    return hmac.compare_digest(expected, digest.strip().lower())


def intended(sub: Subscription | None, mode: str, topic: str) -> bool:
    """Whether a hub's verification of ``mode`` on ``topic`` at ``sub``'s callback (None: no
    subscription there) asks for what this crawl wants: a subscription asked for, pending or
    active, or an unsubscription of one leaving."""
    if sub is None or sub.topic != topic:
        return False
    if mode == SUBSCRIBE:
        return sub.mode == SUBSCRIBE and sub.state in (PENDING, ACTIVE, WANTED)
    return mode == UNSUBSCRIBE and sub.state == LEAVING


def delivery_id(key: str, signature: str) -> str:
    """The identity of a delivery to callback ``key`` signed ``signature`` (its
    ``X-Hub-Signature``; the HMAC of its body with the subscription's secret, so one per
    body): 32 hex digits. The signature rather than a digest of the body: where the check
    for a repeat comes before the signature's (a cluster's, in the one call that reads the
    subscription), a forged delivery marks only its own forged signature, never the body a
    genuine delivery will bring."""
    method, _, digest = signature.strip().partition("=")
    text = f"{key}\n{method.strip().lower()}={digest.strip().lower()}"
    return xxhash.xxh3_128_hexdigest(text.encode("utf-8", "surrogatepass"))


class RecentDeliveries:
    """The deliveries received in the last ``window`` seconds, by :func:`delivery_id`: one
    process's memory of them (a cluster keeps it in Redis, with the same rule:
    :data:`scrapy_whittle.cluster.websub.DELIVERY`). Holds only what arrived within the
    window: one entry per delivery of the last ``window`` seconds."""

    def __init__(self, window: float = REPEAT_WINDOW) -> None:
        if not (math.isfinite(window) and window > 0):
            raise ValueError(f"window ({window!r}) must be finite and > 0")
        self.window = float(window)
        self.first: dict[str, float] = {}      # id -> first receipt, oldest first

    def repeated(self, delivery: str, now: float) -> bool:
        """Whether ``delivery`` was received within the window before ``now`` (then it is
        a repeat, and its first receipt stays the window's start); else it is remembered as
        received now."""
        first = self.first
        while first:                           # forget what left the window
            oldest, at = next(iter(first.items()))
            if now - at < self.window:
                break
            del first[oldest]
        at = first.get(delivery)
        if at is not None and abs(now - at) < self.window:
            return True
        first.pop(delivery, None)
        first[delivery] = now
        return False

    def __len__(self) -> int:
        return len(self.first)


# -- discovery ---------------------------------------------------------------------------------
_LINK_VALUE = re.compile(r'<([^>]*)>\s*((?:;\s*[^;,]*)*)')
_TAG = re.compile(rb"<(?:[A-Za-z0-9_-]+:)?link\b[^>]*>", re.IGNORECASE)
_JSON_HUBS = re.compile(rb'"hubs"\s*:\s*(\[[^\]]*\])')
_JSON_FEED_URL = re.compile(rb'"feed_url"\s*:\s*("(?:[^"\\]|\\.)*")')
_ATTR = re.compile(rb"""\b(rel|href)\s*=\s*(?:"([^"]*)"|'([^']*)')""", re.IGNORECASE)


def link_header(values: Iterable[str]) -> dict[str, str]:
    """rel -> URL of the first link of each rel in ``Link`` header values (RFC 8288)."""
    found: dict[str, str] = {}
    for value in values:
        for m in _LINK_VALUE.finditer(value):
            url, params = m.group(1).strip(), m.group(2)
            for param in params.split(";"):
                name, _, arg = param.partition("=")
                if name.strip().lower() == "rel":
                    for rel in arg.strip().strip('"').lower().split():
                        found.setdefault(rel, url)
    return found


def body_links(body: bytes) -> dict[str, str]:
    """rel -> URL of the hub and self links in the first :data:`DISCOVERY_BYTES` of a feed's
    body: ``<link>`` / ``<atom:link>`` elements with ``rel`` and ``href``, or JSON Feed's
    ``hubs`` and ``feed_url``."""
    head = body[:DISCOVERY_BYTES]
    found: dict[str, str] = {}
    if head.lstrip()[:1] == b"{":
        # JSON Feed: its "hubs" and "feed_url" members, read at the top of the body only (a
        # large feed is not decoded a second time on the reactor)
        hubs = _JSON_HUBS.search(head)
        if hubs is not None:
            try:
                listed = json.loads(hubs.group(1))
            except (ValueError, RecursionError):
                listed = []
            for hub in listed if isinstance(listed, list) else ():
                if isinstance(hub, dict) and str(hub.get("type", "")).lower() == "websub" \
                        and isinstance(hub.get("url"), str):
                    found.setdefault("hub", hub["url"])
        feed_url = _JSON_FEED_URL.search(head)
        if feed_url is not None:
            try:
                found["self"] = json.loads(feed_url.group(1))
            except ValueError:
                pass
        return found
    for tag in _TAG.finditer(head):
        attrs = {m.group(1).lower(): (m.group(2) or m.group(3) or b"")
                 for m in _ATTR.finditer(tag.group(0))}
        if b"href" in attrs and b"rel" in attrs:
            for rel in attrs[b"rel"].decode("latin-1").lower().split():
                found.setdefault(rel, attrs[b"href"].decode("utf-8", "replace").strip())
    return found


def discover(url: str, body: bytes, link_values: Iterable[str] = ()) -> tuple[str, str] | None:
    """(hub, topic) a feed fetched at ``url`` names (the ``Link`` header first, then the
    body), or None when it names no http(s) hub. The topic is its ``self`` link, else
    ``url``; relative links are resolved against ``url``."""
    header = link_header(link_values)
    links = body_links(body) if "hub" not in header else {}
    hub = header.get("hub") or links.get("hub")
    if not hub:
        return None
    topic = header.get("self") or links.get("self") or url
    hub, topic = urljoin(url, hub), urljoin(url, topic)
    if not hub.startswith(("http://", "https://")):
        return None
    return hub, topic


# -- the subscriptions -------------------------------------------------------------------------
@dataclass
class Subscriptions:
    """Every source's subscription (see the module docstring). ``callback``: the public base
    URL (``WHITTLE_WEBSUB_CALLBACK``); ``lease``: the lease asked for, seconds
    (``WHITTLE_WEBSUB_LEASE``)."""

    callback: str
    lease: float
    by_key: dict[str, Subscription] = field(default_factory=dict)
    by_source: dict[int, Subscription] = field(default_factory=dict)
    changed: bool = False
    #: with a set here, the callback keys of the subscriptions changed (or gone) are added to
    #: it, for a copy kept elsewhere (a cluster's, in Redis) to follow; ``changed`` is the
    #: checkpoint's
    dirty: set[str] | None = None

    def _edited(self, sub: Subscription) -> None:
        self.changed = True
        if self.dirty is not None:
            self.dirty.add(sub.key)

    def callback_url(self, sub: Subscription) -> str:
        return f"{self.callback.rstrip('/')}/{sub.key}"

    def _add(self, sub: Subscription) -> None:
        self.by_key[sub.key] = sub
        if sub.state != LEAVING:
            self.by_source[sub.source] = sub
        self._edited(sub)

    def _drop(self, sub: Subscription) -> None:
        self.by_key.pop(sub.key, None)
        if self.by_source.get(sub.source) is sub:
            del self.by_source[sub.source]
        self._edited(sub)

    # -- what the crawl learns ------------------------------------------------------------
    def discovered(self, source: int, hub: str, topic: str, now: float) -> bool:
        """Source ``source``'s feed names ``hub`` for ``topic``: subscribe if it is not
        subscribed there yet (a subscription elsewhere is left). True when a request is due."""
        sub = self.by_source.get(source)
        if sub is not None and sub.hub == hub and sub.topic == topic:
            return False
        if sub is not None:
            self._leave(sub, now)
        self._add(Subscription(source=source, topic=topic, hub=hub,
                               key=secrets.token_urlsafe(12),
                               secret=secrets.token_hex(SECRET_BYTES), state=WANTED,
                               retry_at=now))
        return True

    def source_left(self, source: int, now: float) -> None:
        """Source ``source`` left the crawl: unsubscribe."""
        sub = self.by_source.get(source)
        if sub is not None:
            self._leave(sub, now)

    def _leave(self, sub: Subscription, now: float) -> None:
        if self.by_source.get(sub.source) is sub:
            del self.by_source[sub.source]
        if sub.state in (WANTED, DENIED) and sub.mode == SUBSCRIBE and \
                not math.isfinite(sub.expires_at):
            self._drop(sub)                  # never subscribed: nothing to undo
            return
        sub.state, sub.mode, sub.retry_at, sub.failures = LEAVING, UNSUBSCRIBE, now, 0
        self._edited(sub)

    # -- requests to hubs ------------------------------------------------------------------
    def due(self, now: float) -> list[HubRequest]:
        """The requests to send now (subscriptions, renewals, retries, unsubscriptions); each
        is counted as sent (:meth:`failed` when it fails)."""
        out = []
        for sub in list(self.by_key.values()):
            if sub.state == ACTIVE and now >= renew_at(sub.requested_at, sub.lease_seconds):
                sub.state = WANTED
            if sub.state in (PENDING, DENIED) and now >= sub.retry_at:
                sub.state = WANTED               # never verified, or denied: ask again
                if sub.mode == SUBSCRIBE:
                    sub.failures += 1
            if sub.state == LEAVING and now >= sub.expires_at:
                self._drop(sub)                  # the lease is over: nothing to undo
            elif sub.state == LEAVING and now >= sub.retry_at:
                out.append(self._request(sub, UNSUBSCRIBE, now))
            elif sub.state == WANTED and now >= sub.retry_at:
                out.append(self._request(sub, SUBSCRIBE, now))
        return out

    def _request(self, sub: Subscription, mode: str, now: float) -> HubRequest:
        sub.mode, sub.requested_at = mode, now
        if mode == SUBSCRIBE:
            sub.state = PENDING
        sub.retry_at = now + retry_wait(sub.failures + 1)
        self._edited(sub)
        form = {"hub.mode": mode, "hub.topic": sub.topic, "hub.callback": self.callback_url(sub)}
        if mode == SUBSCRIBE:
            form["hub.secret"] = sub.secret
            form["hub.lease_seconds"] = f"{self.lease:.0f}"
        return HubRequest(sub.key, sub.hub, mode, form)

    def failed(self, key: str, now: float) -> None:
        """The hub refused the request or could not be reached: asked again after a
        back-off (an unsubscription given up once its lease is over)."""
        sub = self.by_key.get(key)
        if sub is None:
            return
        sub.failures += 1
        sub.retry_at = now + retry_wait(sub.failures)
        if sub.state == PENDING:
            sub.state = WANTED
        if sub.state == LEAVING and now >= sub.expires_at:
            self._drop(sub)
        self._edited(sub)

    def next_due(self) -> float:
        """When :meth:`due` has something to send next (inf: nothing)."""
        t = math.inf
        for sub in self.by_key.values():
            if sub.state == ACTIVE:
                t = min(t, renew_at(sub.requested_at, sub.lease_seconds))
            else:
                t = min(t, sub.retry_at)
        return t

    # -- what the hub asks --------------------------------------------------------------------
    def verify(self, key: str, mode: str, topic: str, lease_seconds: str | None,
               now: float) -> bool:
        """A hub's verification of intent (a GET of the callback): True when this crawl asked
        for ``mode`` on ``topic`` at this callback (answer with the challenge), else False
        (answer 404). A subscription verified starts the lease the hub granted."""
        sub = self.by_key.get(key)
        if not intended(sub, mode, topic):
            return False
        if mode == SUBSCRIBE:
            try:
                lease = float(lease_seconds) if lease_seconds is not None else self.lease
            except ValueError:
                lease = self.lease
            if not (math.isfinite(lease) and lease > 0):
                lease = self.lease
            sub.state, sub.lease_seconds, sub.failures = ACTIVE, lease, 0
            sub.requested_at, sub.expires_at = now, now + lease
            self._edited(sub)
            return True
        self._drop(sub)                      # an unsubscription verified
        return True

    def denied(self, key: str, topic: str, now: float) -> bool:
        """The hub denied a subscription (``hub.mode=denied``): asked again after a back-off.
        False when it names no subscription of ours."""
        sub = self.by_key.get(key)
        if sub is None or sub.topic != topic or sub.mode != SUBSCRIBE:
            return False
        sub.failures += 1
        sub.state, sub.retry_at = DENIED, now + retry_wait(sub.failures)
        self._edited(sub)
        return True

    def delivery(self, key: str, body: bytes, signature: str | None) -> Subscription | str:
        """A delivery POSTed to callback ``key``: its subscription, or why it is dropped:
        ``"push_unknown_callback"`` (no subscription of ours), ``"push_signature"`` (the
        signature is missing or wrong)."""
        sub = self.by_key.get(key)
        if sub is None:
            return "push_unknown_callback"
        if not check_signature(sub.secret, body, signature):
            return "push_signature"
        return sub

    # -- the store ---------------------------------------------------------------------------
    def rows(self) -> list[tuple]:
        return [sub.row() for sub in self.by_key.values()]

    def load(self, rows: Iterable[Iterable]) -> None:
        self.by_key.clear()
        self.by_source.clear()
        for row in rows:
            self._add(Subscription.from_row(row))
        self.changed = False

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for sub in self.by_key.values():
            out[sub.state] = out.get(sub.state, 0) + 1
        return out

