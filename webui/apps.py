from urllib.parse import urlsplit

from django.apps import AppConfig
from django.db.models.signals import post_migrate


def name_the_site(sender, using="default", **kwargs) -> None:
    """The Site is the deployment: allauth's e-mails say its name and domain ("[Hikyaku]
    Confirm your e-mail", not "[example.com]"). Django's sites app creates example.com after
    migrating; this runs after it, on every migrate, so a changed HIKYAKU_BASE_URL shows too."""
    from django.conf import settings
    from django.contrib.sites.models import Site

    domain = urlsplit(settings.HIKYAKU_BASE_URL).netloc or "localhost:8000"
    Site.objects.using(using).filter(pk=settings.SITE_ID).exclude(
        name=settings.HIKYAKU_SITE_NAME, domain=domain
    ).update(name=settings.HIKYAKU_SITE_NAME, domain=domain)


class WebuiConfig(AppConfig):
    name = "webui"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.apps import apps

        # After the sites app's own handler (connected first), which makes example.com.
        post_migrate.connect(name_the_site, sender=apps.get_app_config("sites"))
