"""The kinds of failure a feed fetch can end in: the stats keys ``whittle/errors/<kind>``.

Every failed fetch of a source is one of these kinds (and only these: a kind is part of the
stats' interface, so exception class names never leak into it). ``exception_kind`` maps a
download error, as Scrapy and Twisted raise it, onto a kind; the feed errors come from
:data:`scrapy_whittle.feeds.parsers.types.FEED_ERROR_KINDS`, the HTTP ones from the status
(``http_<code>``). docs/scrapy.md lists them with what triggers each (a test checks that the
two agree).
"""

from __future__ import annotations

from scrapy.exceptions import IgnoreRequest

#: kind -> what triggers it (``http_<code>`` stands for every HTTP status >= 400)
ERROR_KINDS: dict[str, str] = {
    "connection": "the connection was refused, reset or closed before the response ended",
    "dns": "the host name does not resolve",
    "timeout": "no complete response within DOWNLOAD_TIMEOUT",
    "tls": "the TLS handshake failed (certificate, protocol)",
    "http_<code>": "an HTTP status >= 400 (http_404, http_429, http_503, ...)",
    "redirect": "a 3xx answer that was not followed (no Location, or redirects disabled)",
    "redirect_loop": "a redirect back to a URL already visited in the same chain",
    "too_many_redirects": "more redirects than REDIRECT_MAX_TIMES",
    "too_large": "a body beyond WHITTLE_MAX_FEED_SIZE: announced, received, or inflated",
    "empty": "an empty body",
    "not_a_feed": "an HTML page, XML that is neither RSS, Atom nor a sitemap, JSON that is no "
                  "JSON Feed",
    "malformed": "XML or JSON no reader can get entries from (nested too deep, a cut gzip "
                 "body included)",
    "encoding": "a body in no character encoding that decodes it",
    "parse_failed": "the parser's worker timed out (WHITTLE_PARSE_TIMEOUT) or died",
    "robots": "robots.txt forbids the URL (ROBOTSTXT_OBEY)",
    "unsupported_url": "a URL scheme Scrapy cannot download",
    "cancelled": "the download was cancelled for another reason than its size",
    "ignored": "another middleware dropped the request (IgnoreRequest)",
    "other": "anything else; the log line names the exception",
}


class RedirectLoop(IgnoreRequest):
    """A source request redirected back to a URL it already visited."""


_TLS = ("ssl", "tls", "certificate", "handshake")      # module or class, any case
_TIMEOUT = ("Timeout", "TimedOut")
_DNS = ("DNSLookup", "CannotResolveHost", "gaierror")
_CONNECTION = ("Connect", "ConnectionLost", "ConnectionDone", "ConnectionAborted",
               "ConnectionReset", "ConnectionClosed", "BrokenPipe", "ResponseNeverReceived",
               "ResponseFailed", "DataLoss", "DownloadFailed", "RequestTransmissionFailed",
               "RequestNotSent")


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc``, its causes and, for Twisted's ResponseFailed family, its reasons."""
    out, todo, seen = [], [exc], set()
    while todo and len(out) < 16:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        out.append(e)
        todo += [e.__cause__, e.__context__]
        for reason in getattr(e, "reasons", None) or ():
            todo.append(getattr(reason, "value", reason))
    return [e for e in out if isinstance(e, BaseException)]


def _any(names: list[str], parts: tuple[str, ...]) -> bool:
    return any(p in name for name in names for p in parts)


def exception_kind(exc: BaseException) -> str:
    """The kind (a key of :data:`ERROR_KINDS`) of a download error."""
    if isinstance(exc, RedirectLoop):
        return "redirect_loop"
    message = str(exc)
    if isinstance(exc, IgnoreRequest):
        if "max redirections" in message:
            return "too_many_redirects"
        if "DOWNLOAD_MAXSIZE" in message or "max size" in message:
            return "too_large"
        if "robots.txt" in message:
            return "robots"
        return "ignored"
    chain = _chain(exc)
    names = [type(e).__name__ for e in chain]
    if names[0] in ("DownloadCancelledError", "CancelledError"):
        # Scrapy cancels a body it is receiving beyond download_maxsize with no message
        return "too_large" if "max size" in message or not message else "cancelled"
    qualified = [f"{type(e).__module__}.{type(e).__name__}".lower() for e in chain]
    if _any(qualified, _TLS):
        return "tls"
    for kind, parts in (("timeout", _TIMEOUT), ("dns", _DNS), ("connection", _CONNECTION)):
        if _any(names, parts):
            return kind
    if _any(names, ("UnsupportedURLScheme", "SchemeNotSupported", "NotSupported")):
        return "unsupported_url"
    return "other"


def describe(exc: BaseException) -> str:
    """The cause of a failure for the log: exception class and message, and the innermost
    Twisted reason when there is one (``ResponseFailed([ConnectionLost])``)."""
    chain = _chain(exc)
    text = f"{type(exc).__name__}: {exc}".rstrip(": ")
    inner = chain[-1] if len(chain) > 1 else None
    if inner is not None and type(inner) is not type(exc):
        text += f" ({type(inner).__name__}: {inner})".replace(": )", ")")
    return text[:500]
