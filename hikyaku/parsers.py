"""The JSON we accept on every surface, and the JSON we write, in one place.

Python's `json` module accepts more than JSON and fails in ways a view does not expect: it
parses `NaN`/`Infinity` and turns `1e400` into an infinite float (neither can be rendered back
or stored), keeps unpaired UTF-16 surrogates (`"\\ud800"`) that no UTF-8 encoder accepts, and
raises `RecursionError` — not `ValueError` — on deeply nested arrays. Each of those used to
surface as an HTTP 500 further down. NUL (`"\u0000"`) is valid JSON but Postgres cannot store
it in text or jsonb (a 503 there, stored as-is on SQLite), so it is refused on every backend
alike. `loads` refuses all of these with `ValueError`, so callers answer "parse error" for
every malformed body with one `except ValueError`. `dumps` writes every JSON answer of the
JSON-RPC endpoints and the streams, whichever server (WSGI or ASGI) serves them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

import orjson
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser, get_encoding

# A `\u0000` or `\uD800`–`\uDFFF` escape: only bodies containing one need the full check
# (neither character can appear unescaped in valid JSON).
_SUSPECT_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89abcdefABCDEF])")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number out of range: {text[:40]}")
    return value


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def loads(body: bytes | str) -> Any:
    """Parse a request body as strict JSON; raise ValueError for anything else."""
    try:
        value = json.loads(body, parse_float=_finite_float, parse_constant=_reject_constant)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    raw = body if isinstance(body, bytes) else body.encode("utf-8", "surrogatepass")
    if _SUSPECT_ESCAPE.search(raw):
        for text in _strings(value):
            if "\x00" in text:
                raise ValueError("JSON strings must not contain U+0000 (NUL)")
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("JSON string holds an unpaired UTF-16 surrogate") from None
    return value


# What orjson spells otherwise than the standard library: floats below about 1e-4 ("1e-7",
# where `json` writes "1e-07"; "0.00001" where it writes "1e-05"). A number can only be
# followed by one of `,]}` or the end.
_SMALL_FLOAT_EXPONENT = re.compile(rb"e-[0-9]+(?:[,\]}]|\Z)")
_SMALL_FLOAT_DECIMALS = re.compile(rb"\.0000[0-9]*(?:[,\]}]|\Z)")


def dumps(value: Any, *, sort_keys: bool = False) -> bytes:
    """`value` as compact UTF-8 JSON, byte for byte what `json.dumps(value,
    ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys)` writes: orjson, several
    times faster, and the standard library for what orjson refuses (integers beyond 64 bits,
    nesting deeper than 254, non-string keys, unpaired surrogates) or spells otherwise (small
    floats). A surrogate, which can only be in a string, is written as its `\\uXXXX` escape; a
    NaN or an infinity (which `loads` never lets in) is `null`. Sorted keys are in code point
    order either way (orjson sorts UTF-8 bytes, which order the same)."""
    try:
        data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS if sort_keys else None)
    except TypeError:
        data = None
    if data is None or _SMALL_FLOAT_EXPONENT.search(data) or _SMALL_FLOAT_DECIMALS.search(data):
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys)
        data = text.encode("utf-8", "backslashreplace")
    return data


def _strings(value: Any) -> Iterator[str]:
    """Every string (keys included) in a parsed JSON value, without recursion."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


class StrictJSONParser(JSONParser):
    """DRF's JSON parser with `loads`' rules (DRF lets RecursionError escape as a 500)."""

    def parse(self, stream, media_type=None, parser_context=None):
        encoding = get_encoding(parser_context or {})
        try:
            return loads(stream.read().decode(encoding))
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
