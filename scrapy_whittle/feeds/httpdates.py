"""HTTP dates (RFC 9110) to and from unix seconds, fast: one is read from most feed responses
and written into most feed requests."""

from __future__ import annotations

import calendar
import time
from email.utils import parsedate_to_datetime

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_MONTH_NUMBER = {m: i for i, m in enumerate(_MONTHS, 1)}


def http_date(t: float) -> str:
    """The IMF-fixdate of unix time ``t``, as ``email.utils.formatdate(t, usegmt=True)``
    writes it, without its general-purpose formatting (called for every conditional GET)."""
    g = time.gmtime(t)
    return (f"{_DAYS[g.tm_wday]}, {g.tm_mday:02d} {_MONTHS[g.tm_mon - 1]} {g.tm_year} "
            f"{g.tm_hour:02d}:{g.tm_min:02d}:{g.tm_sec:02d} GMT")


def unix_seconds(value: str | None) -> int:
    """An HTTP date as whole unix seconds in 1..2^32-1, or 0 when absent or unreadable. The
    IMF-fixdate servers send ("Sun, 06 Nov 1994 08:49:37 GMT") is read directly; other forms
    (RFC 850, asctime) through ``email.utils``."""
    if not value:
        return 0
    parts = value.split()
    try:
        if len(parts) == 6 and parts[5] == "GMT" and parts[2] in _MONTH_NUMBER:
            day, h, m, sec = int(parts[1]), *(int(x) for x in parts[4].split(":"))
            if not (1 <= day <= 31 and 0 <= h < 24 and 0 <= m < 60 and 0 <= sec <= 60):
                return 0
            t = calendar.timegm((int(parts[3]), _MONTH_NUMBER[parts[2]], day, h, m, sec))
        else:
            t = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return 0
    return int(t) if 0 < t < 2**32 else 0
