"""How a progress bar draws: as tqdm does on a terminal; into a log or a pipe (not a terminal), at
most one redraw every :data:`LOG_INTERVAL` seconds, so that a log holds a few lines of a long run
instead of one carriage-return update per step."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["LOG_INTERVAL", "bar_options"]

#: Seconds between two redraws of a bar written to a log.
LOG_INTERVAL = 30.0


def bar_options(stream: Any = None) -> dict[str, Any]:
    """Keyword arguments for ``tqdm(...)`` that write to ``stream`` (default ``sys.stderr``)."""
    stream = sys.stderr if stream is None else stream
    try:
        terminal = bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        terminal = False
    return {} if terminal else {"mininterval": LOG_INTERVAL, "maxinterval": LOG_INTERVAL}
