"""ASGI entry point: serves the whole broker (`make run`) and the stream processes.

A small path dispatcher in front of Django: `/mcp` goes to the MCP Streamable HTTP endpoint
(messaging/mcp_http.py), whose session manager runs in this app's lifespan; everything else
goes to Django.
"""

import os

from django.conf import settings
from django.core.asgi import get_asgi_application

from hikyaku.sqlite_backup import hold_server_lock

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hikyaku.settings")
django_application = get_asgi_application()
# On the embedded SQLite default, `manage.py restore` refuses while this process runs.
hold_server_lock(settings.DATABASES["default"])

from messaging import mcp_http  # noqa: E402  (needs the app registry set up above)


async def application(scope, receive, send):
    if scope["type"] == "lifespan":
        await mcp_http.serve_lifespan(receive, send)
    elif mcp_http.handles(scope):
        await mcp_http.app(scope, receive, send)
    else:
        await django_application(scope, receive, send)
