import json
from datetime import datetime

from django.core.management.base import BaseCommand, CommandError

from hikyaku.errors import HikyakuError
from tenants import services
from tenants.models import Tenant


class Command(BaseCommand):
    help = (
        "Create an API key for a tenant (with --create, the tenant too if it does not exist). "
        "Prints only the raw key."
    )

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True, help="Tenant slug.")
        parser.add_argument("--label", default="", help="Label shown in the admin and web UI.")
        parser.add_argument(
            "--expires", default=None, help="Expiry as ISO 8601, e.g. 2027-01-01T00:00:00Z."
        )
        parser.add_argument(
            "--create",
            action="store_true",
            help="Create the tenant when no tenant has this slug (otherwise that is an error, "
            "so a mistyped slug never makes an ownerless tenant).",
        )
        parser.add_argument(
            "--json", dest="as_json", action="store_true", help="Print one JSON object."
        )

    def handle(
        self,
        *args,
        tenant: str,
        label: str,
        expires: str | None,
        create: bool,
        as_json: bool,
        **options,
    ):
        expires_at = None
        if expires:
            try:
                expires_at = datetime.fromisoformat(expires.replace("Z", "+00:00"))
            except ValueError:
                raise CommandError(f"--expires is not an ISO 8601 date: {expires!r}") from None
            if expires_at.tzinfo is None:
                raise CommandError("--expires needs a time zone, e.g. 2027-01-01T00:00:00Z.")
        if not create and not Tenant.objects.filter(slug=tenant).exists():
            known = ", ".join(Tenant.objects.order_by("slug").values_list("slug", flat=True)[:10])
            raise CommandError(
                f"No tenant has the slug {tenant!r} (existing: {known or 'none'}). "
                "Check the spelling, or add --create to create it."
            )
        try:
            tenant_obj = services.get_or_create_tenant(slug=tenant)
            created = services.create_api_key(tenant=tenant_obj, label=label, expires_at=expires_at)
        except HikyakuError as exc:
            raise CommandError(exc.message) from None
        if as_json:
            self.stdout.write(
                json.dumps(
                    {
                        "api_key": created.raw_key,
                        "prefix": created.api_key.prefix,
                        "tenant": tenant_obj.slug,
                        "label": created.api_key.label,
                        "expires_at": expires_at.isoformat() if expires_at else None,
                    }
                )
            )
        else:
            self.stdout.write(created.raw_key)
