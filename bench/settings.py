"""The benchmark web server's settings: the product's, with the floor view's URL mounted.

Only ROOT_URLCONF differs (bench/urls.py), so everything the broker does per request is the
same as in production; bench/wsgi.py routes the floor through the agents' middleware chain.
"""

from hikyaku.settings import *  # noqa: F403

ROOT_URLCONF = "bench.urls"
