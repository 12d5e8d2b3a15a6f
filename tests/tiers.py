"""The broker's two serving tiers, each a real server process on the test database.

- `asgi`: the ASGI app (hikyaku/asgi.py) under uvicorn — what `make run` and the production
  stream processes serve (the `broker` fixture of tests/live.py);
- `wsgi`: the production WSGI app (hikyaku/wsgi.py) under granian, as the web processes of
  `make cluster` and docker-compose.yml serve it, behind the proxy's hand-off: a web process
  answers a long-held call 421 before reading it, and the proxy sends the same request to a
  stream process (deploy/nginx.conf), as `Tier.request` does here.

Both are spoken to over a real socket and answer with an `Answer`. A streaming answer is
read up to its first event, then the connection is dropped, which is all these tests need.
Tests that use them need committed data: `pytest.mark.django_db(transaction=True)`.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.live import BrokerProcess


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
    def __init__(self, name: str, url: str, handoff: Tier | None = None) -> None:
        self.name = name
        parts = urlsplit(url)
        self.host, self.port = parts.hostname, parts.port
        self.handoff = handoff  # where a 421 is sent again, as the proxy does

    def request(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> Answer:
        answer = self._request(method, path, body, headers)
        if answer.status == 421 and self.handoff is not None:
            return self.handoff.request(method, path, body, headers)
        return answer

    def _request(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> Answer:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=20)
        try:
            conn.request(method, path, body=body or None, headers=headers)
            response = conn.getresponse()
            names = {k.lower(): v for k, v in response.getheaders()}
            if not names.get("content-type", "").startswith("text/event-stream"):
                return Answer(response.status, names, response.read())
            lines, seen_data = [], False
            while line := response.readline():
                lines.append(line)
                seen_data = seen_data or line.startswith(b"data:")
                if seen_data and line in (b"\n", b"\r\n"):
                    break
            return Answer(response.status, names, b"".join(lines))
        finally:
            conn.close()

    def post(self, path: str, body: bytes | str, headers: dict[str, str] | None = None) -> Answer:
        data = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
        return self.request(
            "POST", path, data, {"Content-Type": "application/json", **(headers or {})}
        )

    def get(self, path: str, headers: dict[str, str] | None = None) -> Answer:
        return self.request("GET", path, b"", headers or {})


class WsgiBrokerProcess(BrokerProcess):
    """The WSGI app under granian, as a production web process runs it."""

    def __init__(self, **kwargs) -> None:
        super().__init__(kind="granian-wsgi", **kwargs)


@pytest.fixture(scope="session")
def wsgi_broker(django_db_setup, django_db_blocker) -> Iterator[BrokerProcess]:
    # A dropped stream is noticed at its next write: keepalives often, so that streams the
    # tests abandon give their server threads back quickly.
    server = WsgiBrokerProcess(env={"HIKYAKU_STREAM_KEEPALIVE_SECONDS": "1"}).start()
    yield server
    server.stop()


@pytest.fixture(params=["asgi", "wsgi"])
def tier(request) -> Tier:
    """Each test that takes it runs against both tiers."""
    stream = Tier("asgi", request.getfixturevalue("broker").url)
    if request.param == "asgi":
        return stream
    return Tier("wsgi", request.getfixturevalue("wsgi_broker").url, handoff=stream)
