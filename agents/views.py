"""Plain Django views of the agents app: the broker's A2A agent card."""

import hashlib
import json

from django.http import HttpRequest, HttpResponse, HttpResponseNotModified
from django.views.decorators.http import require_GET

from .cards import broker_card


@require_GET
def broker_agent_card(request: HttpRequest) -> HttpResponse:
    body = json.dumps(broker_card(request), separators=(",", ":")).encode()
    etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
    if etag in [t.strip() for t in request.headers.get("If-None-Match", "").split(",")]:
        response: HttpResponse = HttpResponseNotModified()
    else:
        response = HttpResponse(body, content_type="application/json")
    response["ETag"] = etag
    response["Cache-Control"] = "public, max-age=300"
    response["Access-Control-Allow-Origin"] = "*"
    return response
