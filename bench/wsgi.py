"""The benchmark's WSGI application (granian serves `bench.wsgi:application`).

The product's application as it is (hikyaku/wsgi.py), plus `POST /bench/floor` answered by a
handler with the same middleware chain as agents' JSON-RPC calls, so "send / floor" compares
like with like. Needs DJANGO_SETTINGS_MODULE=bench.settings (bench/server.py sets it).
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")

from hikyaku import wsgi as product  # noqa: E402

from .floor import FLOOR_PATH  # noqa: E402

floor_handler = product.api_handler()
product_application = product.application


def application(environ, start_response):
    if environ.get("PATH_INFO") == FLOOR_PATH and environ.get("REQUEST_METHOD") == "POST":
        return floor_handler(environ, start_response)
    return product_application(environ, start_response)
