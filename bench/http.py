"""A minimal keep-alive HTTP/1.1 client on asyncio streams.

httpx costs ~5 ms of client CPU per request on these machines (docs/MEASUREMENTS.md), which would
make the load generator the bottleneck and blur the figures. This client does only what the
benchmark needs (POST/GET JSON, Content-Length or chunked bodies, keep-alive) for a few tenths
of a ms.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Connection:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def _connect(self) -> None:
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            try:
                await self._writer.wait_closed()
            except OSError:
                pass
            self._reader = self._writer = None

    async def request(
        self, method: str, path: str, *, headers: dict[str, str] | None = None, body: bytes = b""
    ) -> Response:
        if self._writer is None:
            await self._connect()
        assert self._reader is not None and self._writer is not None
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        for name, value in (headers or {}).items():
            lines.append(f"{name}: {value}")
        lines.append(f"Content-Length: {len(body)}")
        self._writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        head = await self._reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        response_headers: dict[str, str] = {}
        for line in header_lines:
            if line:
                name, _, value = line.partition(":")
                response_headers[name.strip().lower()] = value.strip()
        if "content-length" in response_headers:
            data = await self._reader.readexactly(int(response_headers["content-length"]))
        elif response_headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int((await self._reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await self._reader.readuntil(b"\r\n")
                    break
                chunks.append(await self._reader.readexactly(size))
                await self._reader.readexactly(2)
            data = b"".join(chunks)
        else:
            data = await self._reader.read()
            await self.close()
        if response_headers.get("connection", "").lower() == "close":
            await self.close()
        return Response(status=status, headers=response_headers, body=data)

    async def post_json(
        self, path: str, payload: Any, *, headers: dict[str, str] | None = None
    ) -> Response:
        all_headers = {"Content-Type": "application/json", **(headers or {})}
        body = json.dumps(payload, separators=(",", ":")).encode()
        return await self.request("POST", path, headers=all_headers, body=body)
