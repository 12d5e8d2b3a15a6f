"""`make tck`: run the A2A TCK against a public agent's own endpoint on a scratch broker.

1. Unpack the TCK source archive (TCK_ARCHIVE, else ../shared/tools/a2a-tck-*.tar.gz next to
   the repository) into a build directory (TCK_BUILD_DIR, default .tck/) and give it its own
   virtual environment with the dependencies its pyproject.toml names (from PyPI; never in
   our lock).
2. Migrate a scratch SQLite database, start the broker on 127.0.0.1 (TCK_PORT, else a free
   port; started and stopped by the process toolkit, testbed/), register an agent in a fresh
   tenant and publish it.
3. Start the responder (conformance/responder.py), which works that agent's inbox.
4. Run `run_tck.py --sut-host <broker>/a2a/agents/<id> --transport jsonrpc`, print the
   requirement table, and exit non-zero when any MUST requirement failed (or the TCK could
   not run). Reports are copied to test-artifacts/tck/.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import testbed

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_DIR = Path(__file__).resolve().parent / "pytest_plugins"
SETUP_AGENT = """
import json
from agents.services import register_agent, set_agent_public
from tenants.services import create_tenant
tenant = create_tenant(name="A2A TCK", slug="a2a-tck")
registered = register_agent(
    tenant=tenant,
    name="TCK responder",
    description="An ephemeral agent answering the A2A TCK's scenarios through Hikyaku.",
    skills=[{"id": "tck", "name": "TCK conformance", "description": "Answers the A2A TCK's "
             "scenario messages.", "tags": ["tck"]}],
)
set_agent_public(agent=registered.agent, public=True)
print(json.dumps({"agent_id": str(registered.agent.id), "token": registered.raw_token}))
"""


def find_archive() -> Path:
    if os.environ.get("TCK_ARCHIVE"):
        return Path(os.environ["TCK_ARCHIVE"])
    # CI keeps it at ../shared/tools; a git worktree sits one level deeper.
    for shared in (ROOT.parent / "shared", ROOT.parent.parent / "shared"):
        found = sorted((shared / "tools").glob("a2a-tck-*.tar.gz"))
        if found:
            return found[-1]
    sys.exit("make tck: no TCK archive; set TCK_ARCHIVE or put it in ../shared/tools/")


def prepare_tck(archive: Path, build: Path) -> tuple[Path, Path]:
    """The unpacked TCK and its virtual environment's python, reused while the archive is
    unchanged."""
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()[:12]
    source = build / f"src-{digest}"
    if not (source / "run_tck.py").exists():
        shutil.rmtree(source, ignore_errors=True)
        unpack = build / f"unpack-{digest}"
        shutil.rmtree(unpack, ignore_errors=True)
        with tarfile.open(archive) as tar:
            tar.extractall(unpack, filter="data")
        (top,) = [p for p in unpack.iterdir() if p.is_dir()]
        top.rename(source)
        shutil.rmtree(unpack)
    venv = build / f"venv-{digest}"
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    if not stamp.exists():
        print("make tck: installing the TCK's dependencies into its own environment...")
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        project = tomllib.loads((source / "pyproject.toml").read_text())["project"]
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
            + project["dependencies"],
            check=True,
        )
        stamp.touch()
    return source, python


def broker_env(build: Path) -> dict[str, str]:
    """A scratch broker: its own SQLite file, in-process doorbells, no rate limits (the TCK
    is one anonymous client sending a few hundred requests), and push notifications allowed
    to the TCK's webhook receiver on 127.0.0.1."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "CELERY_BROKER_URL")}
    env.update(
        DATABASE_URL=f"sqlite:///{build / 'tck.sqlite3'}",
        HIKYAKU_LOG_FORMAT="text",
        HIKYAKU_RATE_LIMIT_PER_MINUTE="0",
        HIKYAKU_ANONYMOUS_RATE_LIMIT_PER_MINUTE="0",
        HIKYAKU_WEBHOOK_ALLOWED_HOSTS="127.0.0.1",
    )
    env.pop("HIKYAKU_BASE_URL", None)
    return env


def requirement_titles(python: Path, source: Path) -> dict[str, dict[str, str]]:
    code = (
        "import json\nfrom tck.requirements.registry import ALL_REQUIREMENTS\n"
        "print(json.dumps({r.id: {'level': r.level.value, 'title': r.title} "
        "for r in ALL_REQUIREMENTS}))"
    )
    out = subprocess.run(
        [str(python), "-c", code], cwd=source, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def print_table(report: dict[str, Any], titles: dict[str, dict[str, str]]) -> list[str]:
    """Print every requirement with its outcome; return the failed MUST requirements."""
    results = report.get("per_requirement", {})
    order = {"MUST": 0, "SHOULD": 1, "MAY": 2}
    names = {"PASS": "pass", "FAIL": "FAIL", "SKIPPED": "not tested", "NOT TESTED": "not tested"}
    counts: dict[str, dict[str, int]] = {level: {} for level in order}
    failed_musts = []
    print()
    print(f"{'Requirement':<26} {'Level':<7} {'Result':<11} Title")
    print("-" * 100)
    ids = sorted(
        set(titles) | set(results), key=lambda r: (order.get(_level(r, titles, results), 3), r)
    )
    for req_id in ids:
        level = _level(req_id, titles, results)
        result = results.get(req_id, {})
        outcome = names.get(result.get("status", "NOT TESTED"), result.get("status", "?"))
        counts.setdefault(level, {})
        counts[level][outcome] = counts[level].get(outcome, 0) + 1
        title = titles.get(req_id, {}).get("title", "")
        print(f"{req_id:<26} {level:<7} {outcome:<11} {title}")
        if outcome == "FAIL":
            if level == "MUST":
                failed_musts.append(req_id)
            for error in result.get("errors", [])[:2]:
                print(f"{'':<46}! {error.splitlines()[0][:150] if error else ''}")
    print("-" * 100)
    for level in order:
        tally = counts.get(level, {})
        print(
            f"{level:<7} pass {tally.get('pass', 0):>3}   fail {tally.get('FAIL', 0):>3}   "
            f"not tested {tally.get('not tested', 0):>3}"
        )
    return failed_musts


def _level(req_id: str, titles: dict, results: dict) -> str:
    return titles.get(req_id, {}).get("level") or results.get(req_id, {}).get("level", "?")


def main() -> None:
    archive = find_archive()
    build = Path(os.environ.get("TCK_BUILD_DIR", ROOT / ".tck")).resolve()
    build.mkdir(parents=True, exist_ok=True)
    source, tck_python = prepare_tck(archive, build)
    env = broker_env(build)
    for leftover in [*build.glob("tck.sqlite3*"), build / "broker.log", build / "responder.log"]:
        leftover.unlink(missing_ok=True)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input", "-v0"], cwd=ROOT, env=env, check=True
    )
    created = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", SETUP_AGENT],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    agent = json.loads(created.stdout.strip().splitlines()[-1])
    port = int(os.environ["TCK_PORT"]) if os.environ.get("TCK_PORT") else None
    broker = testbed.Server(env=env, port=port, log=build / "broker.log")
    responder = None
    try:
        try:
            broker.start()
        except testbed.ProcessError as error:
            sys.exit(f"make tck: the broker did not start: {error}")
        url = broker.url
        responder = testbed.Process(
            [
                sys.executable, "-m", "conformance.responder",
                "--url", url, "--token", agent["token"], "--agent-id", agent["agent_id"],
            ],
            env=env,
            log=build / "responder.log",
        ).spawn()  # fmt: skip
        sut = f"{url}/a2a/agents/{agent['agent_id']}"
        print(f"make tck: A2A TCK ({archive.name}) against {sut} over JSON-RPC")
        reports = source / "reports"
        shutil.rmtree(reports, ignore_errors=True)
        tck_env = {**os.environ, "PYTHONPATH": str(PLUGIN_DIR)}
        run = subprocess.run(
            [
                str(tck_python), "run_tck.py", "--sut-host", sut, "--transport", "jsonrpc",
                "--", "-p", "hikyaku_tck", "-p", "no:cacheprovider",
                "--webhook-host", "127.0.0.1",
            ],
            cwd=source,
            env=tck_env,
            timeout=int(os.environ.get("TCK_TIMEOUT", "1800")),
        )  # fmt: skip
    finally:
        if responder is not None:
            responder.stop()
        broker.stop()
    report_path = reports / "compatibility.json"
    if not report_path.exists():
        sys.exit(f"make tck: the TCK produced no report (exit status {run.returncode})")
    artifacts = ROOT / "test-artifacts" / "tck"
    shutil.rmtree(artifacts, ignore_errors=True)
    shutil.copytree(reports, artifacts)
    for log in ("broker.log", "responder.log"):
        shutil.copy(build / log, artifacts / log)
    failed = print_table(
        json.loads(report_path.read_text()), requirement_titles(tck_python, source)
    )
    print(f"Reports: {artifacts}")
    if failed:
        sys.exit(f"make tck: MUST requirements failed: {', '.join(failed)}")
    print("make tck: every tested MUST requirement passes.")


if __name__ == "__main__":
    main()
