"""Tenants as code: a tenant's agents and policies as a reviewed file (docs/TENANTFILE.md).

`parse` reads the YAML keeping line numbers, `check` / `check_against` validate it strictly,
`export_tenant` writes one, `apply_file` plans and applies one in a transaction.
"""

from .checks import TenantFile, check, check_against
from .parse import Document, Problem, parse
from .plan import Plan, apply_file, export_tenant

__all__ = [
    "Document",
    "Plan",
    "Problem",
    "TenantFile",
    "apply_file",
    "check",
    "check_against",
    "export_tenant",
    "parse",
]
