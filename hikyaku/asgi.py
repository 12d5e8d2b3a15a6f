"""ASGI entry point: serves the whole broker (`make run`) and the stream processes."""

import os

from django.conf import settings
from django.core.asgi import get_asgi_application

from hikyaku.sqlite_backup import hold_server_lock

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hikyaku.settings")
application = get_asgi_application()
# On the embedded SQLite default, `manage.py restore` refuses while this process runs.
hold_server_lock(settings.DATABASES["default"])
