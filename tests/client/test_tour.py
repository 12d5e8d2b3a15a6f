"""The README's curl tour, run end to end as written (scripts/tour.sh) against a real broker."""

from __future__ import annotations

import subprocess
import uuid

from tests.client.conftest import LIVE_DB, base_env, create_api_key
from tests.live import ROOT

pytestmark = LIVE_DB

SCRIPT = ROOT / "scripts" / "tour.sh"


def test_the_readme_tour_is_the_script():
    body = SCRIPT.read_text()
    tour = body[body.index("# Register two agents") :]
    assert tour in (ROOT / "README.md").read_text()


def test_the_tour_runs_end_to_end(client_broker):
    key = create_api_key(f"tour-{uuid.uuid4().hex[:10]}")
    result = subprocess.run(
        ["bash", str(SCRIPT)],
        env=base_env(KEY=key, B=client_broker.url),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == ["alice", "bob"]
    assert lines[2].endswith(" alice: please review PR 12")
    assert lines[3:5] == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    assert lines[5:8] == [
        "created by alice → input_required",
        "accept by bob → working",
        "complete by bob → completed",
    ]
    assert lines[8] and lines[9:] and all("ok" in line for line in lines[9:]), lines
