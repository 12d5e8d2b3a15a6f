"""`manage.py tenantfile export|validate|apply`: a tenant's agents and policies as a file."""

from __future__ import annotations

import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from agents import tenantfile
from agents.models import Agent
from agents.selectors import LIVE_STATUSES
from hikyaku.errors import HikyakuError
from tenants.models import Tenant


class Command(BaseCommand):
    help = (
        "Tenants as code (docs/TENANTFILE.md): export a tenant's agents and policies as YAML, "
        "validate a file, or apply one (prints the plan first; --dry-run stops there)."
    )

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True, metavar="export|validate|apply")
        export = sub.add_parser("export", help="Print the tenant as a tenant file.")
        export.add_argument("--tenant", required=True, help="Tenant slug.")
        validate = sub.add_parser("validate", help="Check a file; exit 1 listing the problems.")
        validate.add_argument("file", help="The tenant file ('-' for standard input).")
        apply = sub.add_parser("apply", help="Plan and apply a file in one transaction.")
        apply.add_argument("file", help="The tenant file ('-' for standard input).")
        apply.add_argument("--dry-run", action="store_true", help="Print the plan only.")
        apply.add_argument(
            "--prune", action="store_true", help="Also deregister live agents absent from the file."
        )

    def handle(self, *args, action: str, **options):
        if action == "export":
            return self.export(options["tenant"])
        filename = options["file"]
        document, parsed = self.read(filename)
        if action == "validate":
            if parsed is not None:
                tenant = Tenant.objects.filter(slug=parsed.slug).first()
                live = (
                    Agent.objects.filter(tenant=tenant, status__in=LIVE_STATUSES) if tenant else []
                )
                tenantfile.check_against(document, parsed, live)
            self.fail_on_problems(filename, document)
            self.stdout.write(
                f"{filename}: valid ({len(parsed.agents)} agent(s) of tenant {parsed.slug})."
            )
            return
        self.fail_on_problems(filename, document)
        try:
            plan = tenantfile.apply_file(
                tenant_file=parsed,
                document=document,
                prune=options["prune"],
                dry_run=options["dry_run"],
                show=lambda p: self.stdout.write("\n".join(p.render())),
            )
        except HikyakuError as exc:
            raise CommandError(f"Nothing was applied: {exc.message}") from None
        self.fail_on_problems(filename, document)
        if options["dry_run"]:
            self.stdout.write("Dry run: nothing was changed.")
        elif plan.steps:
            self.stdout.write(
                f"Applied {len(plan.steps)} step(s); the tenant's policy revision is now "
                f"{plan.revision}. New agents have no token yet: "
                "manage.py agenttoken issue --tenant SLUG --agent NAME."
            )

    def export(self, slug: str) -> None:
        tenant = Tenant.objects.filter(slug=slug).first()
        if tenant is None:
            raise CommandError(f"No tenant {slug!r}.")
        try:
            self.stdout.write(tenantfile.export_tenant(tenant=tenant), ending="")
        except HikyakuError as exc:
            raise CommandError(exc.message) from None

    def read(self, filename: str) -> tuple[tenantfile.Document, tenantfile.TenantFile | None]:
        try:
            raw = sys.stdin.buffer.read() if filename == "-" else Path(filename).read_bytes()
        except OSError as exc:
            raise CommandError(f"Cannot read {filename}: {exc.strerror}.") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw[: exc.start].count(b"\n") + 1
            document = tenantfile.Document(None, problems=[tenantfile.Problem(line, "not UTF-8")])
            return document, None
        document = tenantfile.parse(text)
        return document, tenantfile.check(document)

    def fail_on_problems(self, filename: str, document: tenantfile.Document) -> None:
        if not document.problems:
            return
        for problem in sorted(set(document.problems)):
            self.stderr.write(problem.render(filename))
        raise SystemExit(1)
