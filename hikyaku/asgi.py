"""ASGI entry point: serves the whole broker (`make run`) and the stream processes."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hikyaku.settings")
application = get_asgi_application()
