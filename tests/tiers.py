"""The broker's two serving tiers as one test interface.

- `asgi`: the ASGI app (hikyaku/asgi.py) under a real uvicorn process, what `make run` and
  the production stream processes serve (tests/live.py), over a real socket;
- `wsgi`: the production WSGI app (hikyaku/wsgi.py), called in-process as a WSGI server
  calls it.

Both answer a request with an `Answer`. A streaming answer is read up to its first event and
then dropped, which is all these tests need of it.
"""

from __future__ import annotations

import http.client
import io
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pytest


@dataclass
class Answer:
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes  # the whole body, or a stream's first event

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def streaming(self) -> bool:
        return self.headers.get("content-type", "").startswith("text/event-stream")

    def first_event(self) -> dict[str, Any]:
        """The JSON data of a stream's first event."""
        assert self.streaming, (self.status, self.body[:500])
        data = [line[6:] for line in self.body.decode().splitlines() if line.startswith("data: ")]
        return json.loads("".join(data))


class Tier:
    name = ""

    def request(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> Answer:
        raise NotImplementedError

    def post(self, path: str, body: bytes | str, headers: dict[str, str] | None = None) -> Answer:
        data = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
        return self.request(
            "POST", path, data, {"Content-Type": "application/json", **(headers or {})}
        )

    def get(self, path: str, headers: dict[str, str] | None = None) -> Answer:
        return self.request("GET", path, b"", headers or {})


class AsgiTier(Tier):
    name = "asgi"

    def __init__(self, url: str) -> None:
        self.host, self.port = urlsplit(url).hostname, urlsplit(url).port

    def request(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> Answer:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=20)
        try:
            conn.request(method, path, body=body or None, headers=headers)
            response = conn.getresponse()
            names = {k.lower(): v for k, v in response.getheaders()}
            if names.get("content-type", "").startswith("text/event-stream"):
                lines, seen_data = [], False
                while line := response.readline():
                    lines.append(line)
                    seen_data = seen_data or line.startswith(b"data:")
                    if seen_data and line in (b"\n", b"\r\n"):
                        break
                return Answer(response.status, names, b"".join(lines))
            return Answer(response.status, names, response.read())
        finally:
            conn.close()


class WsgiTier(Tier):
    name = "wsgi"

    def request(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> Answer:
        from hikyaku.wsgi import application

        path, _, query = path.partition("?")
        environ = {
            "REQUEST_METHOD": method,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "SERVER_NAME": "testserver",
            "SERVER_PORT": "80",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1",
            "CONTENT_LENGTH": str(len(body)),
            "HTTP_HOST": "testserver",
            "wsgi.input": io.BytesIO(body),
            "wsgi.errors": io.StringIO(),
            "wsgi.url_scheme": "http",
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
            "wsgi.version": (1, 0),
        }
        for name, value in headers.items():
            key = name.upper().replace("-", "_")
            environ[key if key == "CONTENT_TYPE" else f"HTTP_{key}"] = value
        started: dict[str, Any] = {}

        def start_response(status, response_headers, exc_info=None):
            started["status"] = int(status.split()[0])
            started["headers"] = {k.lower(): v for k, v in response_headers}

        chunks = application(environ, start_response)
        try:
            if started["headers"].get("content-type", "").startswith("text/event-stream"):
                content = next(iter(chunks), b"")
            else:
                content = b"".join(chunks)
        finally:
            getattr(chunks, "close", lambda: None)()
        return Answer(started["status"], started["headers"], content)


@pytest.fixture(params=["asgi", "wsgi"])
def tier(request) -> Tier:
    """Each test that takes it runs against both tiers (the ASGI one needs committed data:
    `pytest.mark.django_db(transaction=True)`)."""
    if request.param == "asgi":
        return AsgiTier(request.getfixturevalue("broker").url)
    return WsgiTier()
