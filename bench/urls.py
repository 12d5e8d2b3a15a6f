"""The product's URLs plus the benchmark's floor view (bench/floor.py), last as it always was."""

from django.urls import include, path

from hikyaku.urls import handler404, handler500
from hikyaku.urls import urlpatterns as product_urlpatterns

urlpatterns = [*product_urlpatterns, path("", include("bench.floor"))]

__all__ = ["handler404", "handler500", "urlpatterns"]
