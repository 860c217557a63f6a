"""A warning about a source logged once per source and kind (then at debug level): a feed
that fails every epoch must not flood the log."""

from __future__ import annotations

import logging


class OnceLog:
    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self._logged: set[tuple[int, str]] = set()

    def __call__(self, sid: int, kind: str, url: str, message: str,
                 level: int = logging.WARNING) -> None:
        if (sid, kind) in self._logged:
            self.logger.debug("source %d (%s): %s", sid, url, message)
            return
        self._logged.add((sid, kind))
        self.logger.log(level, "source %d (%s): %s", sid, url, message)
