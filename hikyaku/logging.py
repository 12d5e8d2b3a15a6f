"""One JSON object per log line, for operators' log pipelines."""

import json
import logging
from contextvars import ContextVar
from datetime import UTC, datetime

import orjson

# The attributes every LogRecord has: anything else on a record is an extra field of its line.
STANDARD_ATTRIBUTES = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}

# The id of the request being handled (hikyaku.request_log sets it), so every line a request
# logs, not only its access line, carries the id.
request_id_var: ContextVar[str | None] = ContextVar("hikyaku_request_id", default=None)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        payload.update({k: v for k, v in vars(record).items() if k not in STANDARD_ATTRIBUTES})
        if "request_id" not in payload:
            request_id = request_id_var.get()
            if request_id is not None:
                payload["request_id"] = request_id
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        try:
            # orjson is several times cheaper than `json` on the access line every request
            # logs; what it cannot encode (an int beyond 64 bits) takes `json`.
            return orjson.dumps(payload, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
        except TypeError:
            return json.dumps(payload, default=str)
