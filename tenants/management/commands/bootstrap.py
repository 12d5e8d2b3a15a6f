import secrets

from django.core.management.base import BaseCommand

from tenants import services
from tenants.models import Membership, Tenant, User


class Command(BaseCommand):
    help = (
        "First-run setup for `make run`: a demo tenant, an admin user and an API key, printed once."
    )

    def add_arguments(self, parser):
        parser.add_argument("--tenant", default="demo")
        parser.add_argument("--email", default="admin@example.com")

    def handle(self, *args, tenant: str, email: str, **options):
        if (
            User.objects.filter(email=email).exists()
            and Tenant.objects.filter(slug=tenant).exists()
        ):
            self.stdout.write(
                f"Demo tenant {tenant!r} and admin {email} already exist (their credentials "
                "were printed on first run).\n"
                f"  A new key:            .venv/bin/python manage.py createapikey --tenant {tenant}\n"
                f"  Lost the admin password? .venv/bin/python manage.py changepassword {email}"
            )
            return
        password = secrets.token_urlsafe(12)
        user = User.objects.filter(email=email).first()
        if user is None:
            user = User.objects.create_superuser(email, password)
        else:
            user.set_password(password)
            user.save(update_fields=["password"])
        tenant_obj = services.get_or_create_tenant(slug=tenant)
        services.add_member(tenant=tenant_obj, user=user, role=Membership.Role.OWNER)
        key = services.create_api_key(tenant=tenant_obj, label="demo", created_by=user)
        self.stdout.write(
            "\n".join(
                [
                    "",
                    "  Hikyaku is set up. These are shown once:",
                    f"    admin login:  {email} / {password}",
                    f"    demo API key: {key.raw_key}   (tenant {tenant!r})",
                    f"  Lost the password later? .venv/bin/python manage.py changepassword {email}",
                    "",
                ]
            )
        )
