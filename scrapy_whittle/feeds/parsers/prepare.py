"""What every parser is given: the body in UTF-8, with no DOCTYPE internal subset.

``to_utf8`` picks the body's character encoding as feedparser does (RFC 3023: the HTTP
charset for XML media types, else the XML declaration, else a byte-order mark; then UTF-8,
windows-1252 and iso-8859-2 when the declared one does not decode) and returns UTF-8 bytes
with a matching XML declaration. The common case, a UTF-8 feed declared as such, costs one
UTF-8 validation and no copy.

``strip_internal_subset`` removes the internal subset (``[...]``) of a DOCTYPE before the
root element, so that no parser can ever see an entity declaration: no "billion laughs"
expansion, no linear amplification (one 1 KB entity referenced 10^6 times), no external
entity (``SYSTEM "file:///etc/passwd"``). feedparser, through expat, does expand internal
entities (measured: 10^5 characters from a 600-byte "billion laughs" body); feedparser-rs
does not. A reference to a removed entity stays as text.
"""

from __future__ import annotations

import codecs
import re

_XML_DECL = re.compile(rb"^<\?xml[^>]*?>", re.DOTALL)
_DECL_ENCODING = re.compile(rb"""encoding\s*=\s*(?:"([^"]*)"|'([^']*)')""")
_FIRST_ELEMENT = re.compile(rb"<[A-Za-z_]")
_XML_APPLICATION = ("application/xml", "application/xml-dtd",
                    "application/xml-external-parsed-entity")
_XML_TEXT = ("text/xml", "text/xml-external-parsed-entity")
_UTF8_NAMES = {"utf-8", "utf8", "u8", "utf_8"}
_ASCII_NAMES = {"us-ascii", "ascii", "646", "iso646-us", "ansi_x3.4-1968"}
_BOMS = ((codecs.BOM_UTF32_BE, "utf-32be"), (codecs.BOM_UTF32_LE, "utf-32le"),
         (codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_BE, "utf-16be"),
         (codecs.BOM_UTF16_LE, "utf-16le"))
_MARKERS = ((b"\x00\x00\x00<", "utf-32be"), (b"<\x00\x00\x00", "utf-32le"),
            (b"\x00<\x00?", "utf-16be"), (b"<\x00?\x00", "utf-16le"),
            (b"Lo\xa7\x94", "cp037"))


class EncodingUnknown(ValueError):
    """No candidate encoding decodes the body."""


def _media_type(content_type: str | None) -> tuple[str, str]:
    if not content_type:
        return "", ""
    parts = content_type.split(";")
    charset = ""
    for param in parts[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            charset = value.strip().strip("\"'").lower()
    return parts[0].strip().lower(), charset


def _sniff(body: bytes) -> tuple[str, bytes]:
    """(encoding from a byte-order mark or a UTF-16/32 pattern, body without the mark)."""
    for bom, name in _BOMS:
        if body.startswith(bom) and not (name.startswith("utf-16") and body[2:4] == b"\0\0"):
            return name, body[len(bom):]
    for marker, name in _MARKERS:
        if body.startswith(marker):
            return name, body
    return "", body


def _declared(body: bytes, sniffed: str) -> str:
    head = body[:512]
    if sniffed and sniffed not in _UTF8_NAMES:
        try:
            head = head.decode(sniffed, "ignore").encode("utf-8")
        except LookupError:
            return ""
    decl = _XML_DECL.match(head)
    if not decl:
        return ""
    enc = _DECL_ENCODING.search(decl.group(0))
    if not enc:
        return ""
    name = (enc.group(1) or enc.group(2) or b"").decode("ascii", "replace").strip().lower()
    if sniffed and name in ("utf-16", "utf16", "utf_16", "u16", "utf-32", "utf32", "utf_32",
                            "u32", "ucs-2", "ucs-4", "iso-10646-ucs-2", "iso-10646-ucs-4"):
        return sniffed
    return name


def to_utf8(body: bytes, content_type: str | None = None) -> tuple[bytes, str | None]:
    """(``body`` in UTF-8 with a UTF-8 XML declaration, a warning or None).

    Raises EncodingUnknown when nothing decodes it."""
    sniffed, data = _sniff(body)
    declared = _declared(data, sniffed)
    media, charset = _media_type(content_type)
    if media in _XML_APPLICATION or (media.startswith("application/") and media.endswith("+xml")):
        chosen = charset or declared or "utf-8"
    elif media in _XML_TEXT or media.startswith("text/"):
        chosen = charset or "us-ascii"
    elif content_type is None:
        chosen = declared or "utf-8"
    else:
        chosen = declared or "utf-8"
    chosen = "gb18030" if chosen == "gb2312" else chosen
    candidates = [chosen, declared, sniffed, "utf-8", "windows-1252", "iso-8859-2"]
    tried: list[str] = []
    for name in candidates:
        name = "gb18030" if name == "gb2312" else name
        if not name or name in tried:
            continue
        tried.append(name)
        if name in _UTF8_NAMES or name in _ASCII_NAMES:
            try:
                data.decode("utf-8" if name in _UTF8_NAMES else "ascii")
            except UnicodeDecodeError:
                continue
            fast = declared in _UTF8_NAMES or declared in _ASCII_NAMES or not declared
            utf8 = data if fast else _redeclare(data.decode("utf-8"))
        else:
            try:
                utf8 = _redeclare(data.decode(name))
            except (UnicodeDecodeError, LookupError):
                continue
        warning = None
        if name != chosen:
            warning = f"CharacterEncodingOverride: document declared as {chosen}, parsed as {name}"
        return utf8, warning
    raise EncodingUnknown(f"document encoding unknown, tried {', '.join(tried)}")


def _redeclare(text: str) -> bytes:
    decl = '<?xml version="1.0" encoding="utf-8"?>'
    if text.startswith("<?xml"):
        end = text.find("?>")
        if end >= 0:
            return (decl + text[end + 2:]).encode("utf-8")
    return (decl + "\n" + text).encode("utf-8")


def strip_internal_subset(body: bytes) -> tuple[bytes, bool]:
    """(``body`` without the internal subset of its DOCTYPE, whether one was removed).

    The prolog is scanned as XML defines it (declaration, processing instructions,
    comments, white space, then at most one DOCTYPE); the DOCTYPE keeps its name and
    external identifier (``<!DOCTYPE rss PUBLIC "-//Netscape..." "...">`` still marks RSS
    0.91), which no parser here fetches. An internal subset that never ends takes the rest
    of the prolog with it. Text before the prolog (junk, a byte-order mark) is skipped up to
    the first ``<``."""
    i = _doctype_start(body)
    if i < 0:
        return body, False
    i, n = i + len(b"<!DOCTYPE"), len(body)
    quote = None
    while i < n:
        c = body[i:i + 1]
        if quote:
            if c == quote:
                quote = None
        elif c in (b'"', b"'"):
            quote = c
        elif c == b"[":
            close = _subset_end(body, i + 1)
            if close < 0:
                return body[:i] + b">" + _after_prolog(body, i), True
            j = body.find(b">", close + 1)
            j = n if j < 0 else j
            return body[:i] + body[close + 1:j].strip() + body[j:], True
        elif c == b">":
            return body, False
        i += 1
    return body, False


def _doctype_start(body: bytes) -> int:
    """Index of ``<!DOCTYPE`` if the prolog has one, else -1."""
    i, n = body.find(b"<"), len(body)
    while 0 <= i < n:
        if body.startswith(b"<?", i):
            j = body.find(b"?>", i + 2)
        elif body.startswith(b"<!--", i):
            j = body.find(b"-->", i + 4)
        elif body[i:i + 9].upper() == b"<!DOCTYPE":
            return i
        else:
            return -1                  # the root element (or junk): no DOCTYPE before it
        if j < 0:
            return -1
        i = body.find(b"<", j + 2)
    return -1


def _subset_end(body: bytes, i: int) -> int:
    """Index of the ``]`` closing an internal subset that starts at ``i`` (quoted strings and
    comments skipped), or -1."""
    n = len(body)
    while i < n:
        c = body[i:i + 1]
        if c in (b'"', b"'"):
            j = body.find(c, i + 1)
            if j < 0:
                return -1
            i = j + 1
            continue
        if body.startswith(b"<!--", i):
            j = body.find(b"-->", i + 4)
            if j < 0:
                return -1
            i = j + 3
            continue
        if c == b"]":
            return i
        i += 1
    return -1


def _after_prolog(body: bytes, i: int) -> bytes:
    first = _FIRST_ELEMENT.search(body, i)
    return body[first.start():] if first else b""


_HTML_START = re.compile(rb"^\s*(?:<\?xml[^>]*>\s*)?(?:<!--.*?-->\s*)*"
                         rb"(?:<!doctype\s+html|<html[\s>]|<head[\s>]|<body[\s>])",
                         re.IGNORECASE | re.DOTALL)


def looks_like_html(body: bytes) -> bool:
    """Whether the body starts like an HTML page (a site's front page served at a feed URL)."""
    return bool(_HTML_START.match(body[:4096]))
