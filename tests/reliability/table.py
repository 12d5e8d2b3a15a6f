"""The README's reliability table, from what the fault scenarios recorded.

    make test-pg PYTEST_ARGS="tests/reliability -m slow"       # writes the figures
    .venv/bin/python -m tests.reliability.table                # prints the Markdown table

Each scenario's `record(...)` call (harness.py) writes test-artifacts/reliability/<name>.json;
this prints one row per file: the scenario, its load, the faults injected, how many messages
were checked, lost and duplicated, and the scenario's own figures (numbers and short lists;
breakdowns such as outcome counts stay in the files).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "reliability"
COLUMNS = ("scenario", "load", "faults", "messages_checked", "lost", "duplicated")
SKIPPED = {*COLUMNS, "database"}


def figures(row: dict[str, Any]) -> str:
    parts = []
    for key, value in row.items():
        if key in SKIPPED or isinstance(value, dict):
            continue
        if isinstance(value, list):
            if not all(isinstance(v, int | float) for v in value):
                continue
            value = ", ".join(str(v) for v in value)
        parts.append(f"{key.replace('_', ' ')}: {value}")
    return "; ".join(parts)


def table(directory: Path = ARTIFACTS) -> str:
    lines = [
        "| scenario | load | faults injected | messages checked | lost | duplicated | figures |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for path in sorted(directory.glob("*.json")):
        row = json.loads(path.read_text())
        database = f" [{row['database']}]" if row.get("database") else ""
        cells = [
            f"{row['scenario']}{database}",
            row["load"],
            str(row["faults"]),
            str(row["messages_checked"]),
            str(row["lost"]),
            str(row["duplicated"]),
            figures(row),
        ]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    if not any(ARTIFACTS.glob("*.json")):
        sys.exit(
            f"No figures in {ARTIFACTS}: run `make test-pg PYTEST_ARGS=tests/reliability` first."
        )
    print(table())
