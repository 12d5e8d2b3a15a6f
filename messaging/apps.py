from django.apps import AppConfig


class MessagingConfig(AppConfig):
    name = "messaging"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from .push import admin  # noqa: F401  (registers the push models in the admin)
