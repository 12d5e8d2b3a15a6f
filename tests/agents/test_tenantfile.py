"""`manage.py tenantfile export|validate|apply` (docs/TENANTFILE.md)."""

from __future__ import annotations

import json
import os
import textwrap
from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command
from django.test import Client

from agents import services
from agents.models import Agent, AgentEvent
from tenants.models import Tenant
from tests import factories

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def run_failing(*args: str) -> list[str]:
    """Run a command that must exit 1; its stderr lines."""
    err = StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command(*args, stdout=StringIO(), stderr=err)
    assert exited.value.code == 1
    return err.getvalue().splitlines()


def export(slug: str) -> str:
    return run("tenantfile", "export", "--tenant", slug)


def write(tmp_path: Path, text: str, name: str = "tenant.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def state(tenant: Tenant) -> list[tuple]:
    """Everything a tenant file governs, as stored."""
    return list(
        Agent.objects.filter(tenant=tenant)
        .order_by("name", "id")
        .values_list(
            "name",
            "description",
            "skills",
            "public",
            "status",
            "send_to",
            "receive_from",
            "disclosure_ceiling",
            "webhook_url",
            "token_hash",
        )
    )


def revision(tenant: Tenant) -> int:
    return Tenant.objects.get(pk=tenant.pk).policy_revision


@pytest.fixture
def team(tenant):
    """alice may send only to bob and holds restricted messages; bob has skills and a
    webhook; carol is disabled and published; dave accepts nobody."""
    alice = factories.agent(tenant, name="alice", description="Reviews\npull requests").model
    bob = factories.agent(
        tenant,
        name="bob",
        skills=[{"name": "Build", "id": "build", "tags": ["ci"]}],
        webhook_url="https://hooks.example.com/bob",
    ).model
    carol = factories.agent(tenant, name="carol").model
    dave = factories.agent(tenant, name="dave").model
    services.set_agent_policy(agent=alice, send_to=[str(bob.pk)], disclosure_ceiling="restricted")
    services.set_agent_policy(agent=dave, receive_from=[])
    services.set_agent_policy(agent=bob, receive_from=[str(alice.pk), str(carol.pk)])
    services.set_agent_enabled(agent=carol, enabled=False)
    services.set_agent_public(agent=carol, public=True)
    gone = factories.agent(tenant, name="gone").model
    services.set_agent_policy(agent=dave, send_to=[str(gone.pk), str(alice.pk)])
    services.deregister_agent(agent=gone)
    return {"alice": alice, "bob": bob, "carol": carol, "dave": dave}


def test_export_writes_every_live_agent_by_name_without_secrets(team, tenant):
    text = export("acme")
    data = yaml.safe_load(text)
    assert data["version"] == 1 and data["tenant"] == {"slug": "acme", "name": "Acme"}
    assert [a["name"] for a in data["agents"]] == ["alice", "bob", "carol", "dave"]
    alice, bob, carol, dave = data["agents"]
    assert list(alice) == [
        "name",
        "description",
        "skills",
        "public",
        "status",
        "send_to",
        "receive_from",
        "disclosure_ceiling",
        "webhook_url",
    ]
    assert alice["send_to"] == ["bob"] and alice["disclosure_ceiling"] == "restricted"
    assert alice["description"] == "Reviews\npull requests"
    assert bob["receive_from"] == ["alice", "carol"]
    assert bob["skills"] == [{"id": "build", "name": "Build", "tags": ["ci"]}]
    assert carol["status"] == "disabled" and carol["public"] is True
    # The deregistered agent is left out of dave's list: it can never be delivered to again.
    assert dave["send_to"] == ["alice"] and dave["receive_from"] == []
    assert "description: |-\n      Reviews\n      pull requests" in text
    for agent in team.values():
        agent.refresh_from_db()
        assert agent.token_hash not in text and str(agent.pk) not in text
    assert "hka_" not in text and "whsec_" not in text


def test_export_then_apply_of_the_same_file_is_a_no_op(team, tenant, tmp_path):
    before, events, rev = state(tenant), AgentEvent.objects.count(), revision(tenant)
    path = write(tmp_path, export("acme"))
    assert run("tenantfile", "apply", path).strip() == "Tenant acme: no changes."
    assert state(tenant) == before
    assert AgentEvent.objects.count() == events and revision(tenant) == rev


def test_a_round_trip_through_a_second_tenant_reproduces_the_policy(team, tenant, tmp_path):
    original = export("acme")
    path = write(tmp_path, original.replace("slug: acme", "slug: beta"))
    output = run("tenantfile", "apply", path)
    assert "+ create tenant beta" in output and "hka_" not in output
    beta = Tenant.objects.get(slug="beta")
    assert export("beta") == original.replace("slug: acme", "slug: beta")
    # The relations point at beta's own agents, not at acme's.
    agents = {a.name: a for a in Agent.objects.filter(tenant=beta)}
    assert agents["alice"].send_to == [str(agents["bob"].pk)]
    assert agents["bob"].receive_from == sorted([str(agents["alice"].pk), str(agents["carol"].pk)])
    assert agents["carol"].status == "disabled" and agents["carol"].public
    assert all(a.token_hash is None for a in agents.values())  # no secret was made
    # Running it again changes nothing.
    assert run("tenantfile", "apply", path).strip() == "Tenant beta: no changes."


def test_the_plan_lists_each_change_field_by_field_then_applies_it(team, tenant, tmp_path):
    data = yaml.safe_load(export("acme"))
    alice, bob, carol, dave = data["agents"]
    alice["send_to"] = ["bob", "erin"]
    alice["description"] = "Reviews"
    bob["status"] = "disabled"
    carol["status"] = "active"
    data["agents"].append({"name": "erin", "receive_from": ["alice"], "public": True})
    data["tenant"]["name"] = "Acme Corp"
    path = write(tmp_path, yaml.safe_dump(data, sort_keys=False))
    rev = revision(tenant)

    output = run("tenantfile", "apply", path)
    assert output.splitlines()[:11] == [
        "Tenant acme: 5 step(s) (1 rename tenant, 1 update, 1 disable, 1 enable, 1 create).",
        "~ rename tenant acme",
        '    name: "Acme" -> "Acme Corp"',
        "~ update agent alice",
        '    description: "Reviews\\npull requests" -> "Reviews"',
        '    send_to: ["bob"] -> ["bob", "erin"]',
        "- disable agent bob",
        "+ enable agent carol",
        "+ create agent erin",
        "    public: true",
        '    receive_from: ["alice"]',
    ]
    erin = Agent.objects.get(tenant=tenant, name="erin")
    assert Agent.objects.get(pk=team["alice"].pk).send_to == sorted(
        [str(team["bob"].pk), str(erin.pk)]
    )
    assert erin.receive_from == [str(team["alice"].pk)] and erin.public
    assert Agent.objects.get(pk=team["bob"].pk).status == "disabled"
    assert Tenant.objects.get(pk=tenant.pk).name == "Acme Corp"
    # One revision per change of who may talk to whom: alice's policy, bob, carol, erin's
    # registration, publication and policy (the rename and a description are not policy).
    assert revision(tenant) == rev + 6
    assert f"policy revision is now {rev + 6}" in output
    assert run("tenantfile", "apply", path).strip() == "Tenant acme: no changes."


def test_dry_run_prints_the_plan_and_changes_nothing(team, tenant, tmp_path):
    data = yaml.safe_load(export("acme"))
    data["agents"][0]["send_to"] = []
    data["agents"].append({"name": "erin"})
    data["tenant"]["slug"] = "acme"
    path = write(tmp_path, yaml.safe_dump(data))
    before, events, rev = state(tenant), AgentEvent.objects.count(), revision(tenant)
    output = run("tenantfile", "apply", path, "--dry-run", "--prune")
    assert "~ update agent alice" in output and "+ create agent erin" in output
    assert output.strip().endswith("Dry run: nothing was changed.")
    assert state(tenant) == before
    assert AgentEvent.objects.count() == events and revision(tenant) == rev
    new_tenant = write(
        tmp_path, "version: 1\ntenant: {slug: zeta}\nagents: [{name: z}]\n", "z.yaml"
    )
    assert "+ create tenant zeta" in run("tenantfile", "apply", new_tenant, "--dry-run")
    assert not Tenant.objects.filter(slug="zeta").exists()


def test_prune_deregisters_live_agents_absent_from_the_file(team, tenant, tmp_path):
    data = yaml.safe_load(export("acme"))
    data["agents"] = [a for a in data["agents"] if a["name"] in ("alice", "bob")]
    data["agents"][1]["receive_from"] = ["alice"]
    path = write(tmp_path, yaml.safe_dump(data))
    assert "deregister" not in run("tenantfile", "apply", path, "--dry-run")
    output = run("tenantfile", "apply", path, "--prune")
    assert "- deregister agent carol (absent from the file; --prune)" in output
    assert "- deregister agent dave (absent from the file; --prune)" in output
    statuses = dict(Agent.objects.filter(tenant=tenant).values_list("name", "status"))
    assert statuses["carol"] == statuses["dave"] == "deregistered"
    assert statuses["alice"] == statuses["bob"] == "active"


def test_prune_refuses_a_relation_to_an_agent_it_would_deregister(team, tenant, tmp_path):
    path = write(
        tmp_path,
        """\
        version: 1
        tenant: {slug: acme, name: Acme}
        agents:
          - name: alice
            send_to:
              - dave
        """,
    )
    before = state(tenant)
    assert run_failing("tenantfile", "apply", path, "--prune") == [
        f"{path}:6: agent 'alice': send_to names 'dave', which is not in this file, so "
        "--prune would deregister it"
    ]
    assert state(tenant) == before
    # Without --prune dave stays, so naming him is fine.
    assert "send_to" in run("tenantfile", "apply", path)


VALID = """\
version: 1
tenant:
  slug: acme
  name: Acme
agents:
  - name: alice
    send_to: [bob]
  - name: bob
"""

# (what is wrong, the file, the line, the message)
PROBLEMS = [
    ("unsupported version", VALID.replace("version: 1", "version: 2"), 1, "unsupported version 2: this release reads version 1"),
    ("no version", VALID.replace("version: 1\n", ""), 1, "missing key 'version'"),
    ("unknown top-level key", VALID + "policies: []\n", 9, "unknown key 'policies' in the file"),
    ("unknown tenant key", VALID.replace("  name: Acme", "  name: Acme\n  plan: gold"), 5, "unknown key 'plan' in tenant"),
    ("unknown agent key", VALID + "    colour: blue\n", 9, "unknown key 'colour' in an agent"),
    ("duplicate agent name", VALID + "  - name: alice\n", 9, "duplicate agent name 'alice' (first at line 6)"),
    ("duplicate key", VALID + "    name: bobby\n", 9, "duplicate key 'name' (first at line 8)"),
    ("relation to nobody known", VALID.replace("[bob]", "[bob, zed]"), 7, "agent 'alice': send_to names 'zed', which is neither in this file nor a live agent of tenant 'acme'"),
    ("bad ceiling", VALID + "    disclosure_ceiling: secret\n", 9, "agent 'bob': disclosure_ceiling: \"secret\" is not a valid choice."),
    ("bad URL", VALID + "    webhook_url: not a url\n", 9, "agent 'bob': webhook_url: Only http and https URLs are allowed."),
    ("private URL", VALID + "    webhook_url: http://169.254.169.254/latest\n", 9, "agent 'bob': webhook_url: 169.254.169.254 is a private, loopback or link-local address"),
    ("status deregistered", VALID + "    status: deregistered\n", 9, "agent 'bob': status: \"deregistered\" is not a valid choice."),
    ("public not a boolean", VALID + "    public: 1\n", 9, "agent 'bob': public: Must be a valid boolean."),
    ("skills without a name", VALID + "    skills: [{id: x}]\n", 9, "agent 'bob': skills: skills[0] needs an 'id' and a 'name'."),
    ("agent without a name", VALID + "  - description: x\n", 9, "agent '#3': name: This field is required."),
    ("bad slug", VALID.replace("slug: acme", "slug: Acme Corp"), 3, "tenant.slug must be a slug"),
    ("not YAML", VALID + "  - [unclosed\n", 10, "not valid YAML: expected ',' or ']'"),
    ("a tag that would run code", VALID + "    description: !!python/object/apply:os.system [id]\n", 9, "not valid YAML: unsupported tag 'tag:yaml.org,2002:python/object/apply:os.system'"),
    ("a scalar's unknown tag", VALID + "    description: !!python/name:os.system x\n", 9, "not valid YAML: could not determine a constructor"),
    ("empty file", "", 1, "the file is empty"),
    ("not a mapping", "- 1\n", 1, "a tenant file is a mapping"),
]  # fmt: skip


@pytest.mark.parametrize(
    "text, line, message", [p[1:] for p in PROBLEMS], ids=[p[0] for p in PROBLEMS]
)
def test_validate_names_each_problem_with_its_line(tenant, tmp_path, text, line, message):
    path = write(tmp_path, text)
    problems = run_failing("tenantfile", "validate", path)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{path}:{line}: {message}"), problems
    # apply refuses the same file with the same words, before planning anything.
    assert run_failing("tenantfile", "apply", path) == problems
    assert not Agent.objects.exists()


def test_validate_accepts_a_good_file_and_reports_every_problem_at_once(tenant, tmp_path):
    assert run("tenantfile", "validate", write(tmp_path, VALID)).endswith(
        "valid (2 agent(s) of tenant acme).\n"
    )
    bad = VALID.replace("version: 1", "version: 3").replace("[bob]", "[zed]")
    bad += "    disclosure_ceiling: top\n  - name: bob\n"
    lines = [
        line.split(":", 2)[1]
        for line in run_failing("tenantfile", "validate", write(tmp_path, bad))
    ]
    assert lines == ["1", "7", "9", "10"]


def test_relations_may_name_live_agents_of_the_tenant_outside_the_file(tenant, tmp_path):
    factories.agent(tenant, name="zed")
    path = write(tmp_path, VALID.replace("[bob]", "[bob, zed]"))
    assert "valid" in run("tenantfile", "validate", path)


def test_a_deregistered_agent_is_not_matched_by_name(tenant, tmp_path):
    """Names are unique among live agents only: a file naming a deregistered agent creates a
    new one, and a relation to it is refused until then."""
    gone = factories.agent(tenant, name="bob").model
    services.deregister_agent(agent=gone)
    outside = write(tmp_path, VALID.replace("  - name: bob\n", ""), "outside.yaml")
    assert run_failing("tenantfile", "validate", outside) == [
        f"{outside}:7: agent 'alice': send_to names 'bob', which is neither in this file nor "
        "a live agent of tenant 'acme'"
    ]
    plan = run("tenantfile", "apply", write(tmp_path, VALID))
    assert "create agent bob" in plan
    bob = Agent.objects.get(tenant=tenant, name="bob", status="active")
    assert bob.pk != gone.pk


def test_apply_is_one_transaction(tenant, tmp_path, settings):
    """A step that fails (here the tenant's agent limit) leaves nothing of the plan behind."""
    settings.HIKYAKU_MAX_AGENTS_PER_TENANT = 2
    zed = factories.agent(tenant, name="zed").model
    text = VALID.replace("name: Acme", "name: Renamed") + "  - name: zed\n    public: true\n"
    path = write(tmp_path, text)
    before, events, rev = state(tenant), AgentEvent.objects.count(), revision(tenant)
    # The rename and alice's creation run before bob's creation fails.
    with pytest.raises(CommandError, match="Nothing was applied: .*maximum of 2 agents"):
        run("tenantfile", "apply", path)
    assert state(tenant) == before and not Agent.objects.get(pk=zed.pk).public
    assert Tenant.objects.get(pk=tenant.pk).name == "Acme"
    assert AgentEvent.objects.count() == events and revision(tenant) == rev


def test_agents_created_from_a_file_get_a_token_only_from_agenttoken_issue(tenant, tmp_path):
    output = run("tenantfile", "apply", write(tmp_path, VALID))
    assert "hka_" not in output and "agenttoken issue" in output
    alice = Agent.objects.get(tenant=tenant, name="alice")
    assert alice.token_hash is None
    token = run("agenttoken", "issue", "--tenant", "acme", "--agent", "alice").strip()
    me = Client().get("/api/v1/agents/me", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert me.status_code == 200 and me.json()["name"] == "alice"


def test_export_of_an_unknown_tenant_is_a_clear_error(db):
    with pytest.raises(CommandError, match="No tenant 'nope'"):
        export("nope")


def test_export_sorts_object_keys_so_both_databases_write_the_same_bytes(tenant):
    factories.agent(tenant, name="a", skills=[{"name": "Z", "id": "z", "description": "d"}])
    skills = yaml.safe_load(export("acme"))["agents"][0]["skills"]
    assert list(skills[0]) == ["description", "id", "name"]
    assert json.dumps(skills)  # plain data, no YAML tags


def test_the_file_can_come_from_standard_input(tenant, monkeypatch):
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(VALID.encode())))
    assert "valid" in run("tenantfile", "validate", "-")


@pytest.mark.django_db(transaction=True)
def test_the_real_command_exits_1_with_one_line_per_problem_on_stderr(tenant, tmp_path):
    import subprocess
    import sys

    from tests.live import ROOT, suite_database_url

    def manage(*args: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "DATABASE_URL": suite_database_url()}
        return subprocess.run(
            [sys.executable, "manage.py", "tenantfile", *args],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    good = write(tmp_path, VALID)
    result = manage("validate", good)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    bad = write(tmp_path, VALID.replace("version: 1", "version: 9") + "    colour: x\n", "bad.yaml")
    result = manage("validate", bad)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"{bad}:1: unsupported version 9: this release reads version 1",
        f"{bad}:9: unknown key 'colour' in an agent (expected: name, description, skills, "
        "public, status, send_to, receive_from, disclosure_ceiling, webhook_url)",
    ]
    result = manage("apply", good)
    assert result.returncode == 0 and "+ create agent alice" in result.stdout


def test_a_file_without_a_tenant_name_leaves_the_name_alone(tenant, tmp_path):
    path = write(tmp_path, "version: 1\ntenant: {slug: acme}\nagents: []\n")
    assert run("tenantfile", "apply", path).strip() == "Tenant acme: no changes."
    assert Tenant.objects.get(pk=tenant.pk).name == "Acme"
    new = write(tmp_path, "version: 1\ntenant: {slug: fresh}\nagents: []\n", "fresh.yaml")
    run("tenantfile", "apply", new)
    assert Tenant.objects.get(slug="fresh").name == "fresh"
