"""Which representation a REST response takes: JSON, whatever the request's Accept says.

The REST API has one representation. DRF answers an Accept header that rules JSON out (or an
empty one) with NotAcceptable, which no edge translates, so such a request got a 500. HTTP lets
a server disregard Accept and send its representation anyway (RFC 9110, section 12.5.1); the
client then gets the answer, or the error envelope of docs/PROTOCOL.md §3, as JSON.
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import NotAcceptable
from rest_framework.negotiation import DefaultContentNegotiation


class JSONRegardless(DefaultContentNegotiation):
    def select_renderer(self, request: Any, renderers: list, format_suffix: str | None = None):
        try:
            return super().select_renderer(request, renderers, format_suffix)
        except NotAcceptable:
            return renderers[0], renderers[0].media_type
