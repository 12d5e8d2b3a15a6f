"""WSGI entry point: the request/response server in production (see README, Topology)."""

import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

from hikyaku.sqlite_backup import hold_server_lock

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hikyaku.settings")
application = get_wsgi_application()
# On the embedded SQLite default, `manage.py restore` refuses while this process runs.
hold_server_lock(settings.DATABASES["default"])
