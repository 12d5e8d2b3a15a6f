"""What every answer of the broker must look like, whatever it was sent."""

from __future__ import annotations

import json
from typing import Any

# Statuses the JSON-RPC endpoint may answer with: 200 (result or error object), 401
# (credentials), 405 (not POST), 413 (body too large), 429 (rate limited), 503 (database down).
RPC_STATUSES = {200, 401, 405, 413, 429}


def assert_no_traceback(content: bytes) -> None:
    lowered = content.lower()
    for marker in (b"traceback", b'file "/', b"exception value", b"django.db.utils"):
        assert marker not in lowered, content[:2000]


def assert_rpc_answer(status: int, content: bytes, *, allow_503: bool = False) -> dict[str, Any]:
    """A JSON-RPC 2.0 response object, or the REST error envelope of the body-size guard."""
    allowed = RPC_STATUSES | ({503} if allow_503 else set())
    assert status in allowed, (status, content[:2000])
    assert_no_traceback(content)
    body = json.loads(content)
    assert isinstance(body, dict), body
    if status == 413:
        assert body["error"]["code"] == "PAYLOAD_TOO_LARGE", body
        return body
    assert body.get("jsonrpc") == "2.0", body
    assert ("result" in body) != ("error" in body), body
    if "error" in body:
        error = body["error"]
        assert isinstance(error.get("code"), int) and isinstance(error.get("message"), str), body
        assert status != 200 or error["code"] != -32603 or allow_503, body
    return body


def assert_rest_answer(status: int, content: bytes) -> Any:
    """Below 500, and every 4xx in the envelope `{"error": {"code", "message"}}`."""
    assert status < 500, (status, content[:2000])
    assert_no_traceback(content)
    if not content:
        return None
    body = json.loads(content)
    if status >= 400:
        assert isinstance(body.get("error", {}).get("code"), str), body
        assert isinstance(body["error"].get("message"), str), body
    return body
