"""Log output of a broker: text lines (default) or one JSON object per line (``log.format``).

Log messages name what they are about in bracketed tags, ``[broker=1] [topic/partition=t/0]
[group=p.1.0]`` (ARCHITECTURE.md). The JSON form lifts each tag into a field of its own, so a
log pipeline can filter by partition without parsing text::

    {"ts": "2026-11-25T09:42:49.351Z", "level": "INFO", "logger": "raftq.broker.replica",
     "msg": "replica open at applied index 0", "topic/partition": "t/0", "group": "p.1.0"}
"""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Literal

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
_TAG = re.compile(r"\[([A-Za-z_][\w/]*)=([^\]]*)\]\s*")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts (UTC, ms), level, logger, msg, the message's tags, and
    ``exc`` with the traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        tags = dict(_TAG.findall(message))
        line = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": _TAG.sub("", message).strip(),
            **{k: v for k, v in tags.items() if k not in ("ts", "level", "logger", "msg")},
        }
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def configure(level: str = "INFO", fmt: Literal["text", "json"] = "text") -> None:
    """Send every log record to stderr in ``fmt`` at ``level`` and above (replaces handlers)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))


__all__ = ["TEXT_FORMAT", "JsonFormatter", "configure"]
