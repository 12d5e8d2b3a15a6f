"""WSGI entry point: the request/response server in production (see README, Topology)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hikyaku.settings")
application = get_wsgi_application()
