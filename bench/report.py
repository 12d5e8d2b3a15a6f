"""The side-by-side results: bench/results/latest.json, history.jsonl and the printed table.

Every figure is taken per round and design; a ratio is taken within a round (ours and theirs
measured minutes apart, under the same background load) and the median of the rounds' ratios
is what is held against the target (issue 13).
"""

from __future__ import annotations

import statistics
from typing import Any

from .phases import PhaseResult

DESIGNS = ("hikyaku-0.3", "hikyaku-1.0", "old-0.3", "embedded-1.0")
LABELS = {
    "hikyaku-0.3": "Hikyaku, 0.3 path (API key + X-Agent-Id)",
    "hikyaku-1.0": "Hikyaku, 1.0 path (agent tokens)",
    "old-0.3": "old broker (0.3, not durable)",
    "embedded-1.0": "embedded default (make run), 1.0 path",
}
COMPONENTS = ("web", "postgres_backends", "postgres_shared", "redis")

# (figure, ours, reference, the largest ratio ours/reference that meets the target)
TARGETS: list[tuple[str, str, str, float]] = [
    *[
        (figure, ours, "old-0.3", limit)
        for figure, limit in (
            ("send_cpu_ms", 0.5),
            ("poll_ack_cpu_ms", 0.5),
            ("broadcast_cpu_ms", 0.1),
            ("send_p99_ms", 1.0),
        )
        for ours in ("hikyaku-0.3", "hikyaku-1.0")
    ],
    ("send_cpu_ms", "hikyaku-0.3", "floor", 2.0),
    ("send_cpu_ms", "hikyaku-1.0", "floor", 2.0),
    ("send_cpu_ms", "embedded-1.0", "hikyaku-1.0", 1.5),
    ("poll_ack_cpu_ms", "embedded-1.0", "hikyaku-1.0", 1.5),
    # Not slow on the clock either: the same send's latency at concurrency 16.
    ("send_p50_ms", "embedded-1.0", "hikyaku-1.0", 1.5),
    ("send_p99_ms", "embedded-1.0", "hikyaku-1.0", 1.5),
]
FIGURES = {  # server CPU ms per operation, latency in ms, at concurrency 16
    "send_cpu_ms": "send, CPU ms per message",
    "poll_ack_cpu_ms": "poll+ack, CPU ms per message",
    "broadcast_cpu_ms": "broadcast, CPU ms per delivery",
    "send_p50_ms": "send latency p50, ms",
    "send_p99_ms": "send latency p99, ms",
    "sends_per_s": "sends per second",
    "floor_cpu_ms": "floor (Django + 1 durable INSERT), CPU ms",
}


def figures(phases: dict[str, PhaseResult]) -> dict[str, float | None]:
    def per_op(name: str) -> float | None:
        phase = phases.get(name)
        return round(phase.per_op["total"], 4) if phase and phase.ops else None

    send = phases.get("send")
    return {
        "send_cpu_ms": per_op("send"),
        "poll_ack_cpu_ms": per_op("poll_ack"),
        "broadcast_cpu_ms": per_op("broadcast"),
        "send_p50_ms": round(send.latency_ms["p50"], 2) if send and send.latency_ms else None,
        "send_p99_ms": round(send.latency_ms["p99"], 2) if send and send.latency_ms else None,
        "sends_per_s": round(send.ops / send.seconds, 1) if send and send.ops else None,
        "floor_cpu_ms": per_op("floor"),
    }


def components(phases: dict[str, PhaseResult], name: str) -> dict[str, float] | None:
    phase = phases.get(name)
    if not phase or not phase.ops:
        return None
    return {c: round(phase.per_op.get(c, 0.0), 4) for c in COMPONENTS}


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 4) if present else None


def summarize(
    rounds: list[dict[str, Any]],
    *,
    environment: dict[str, Any],
    config: dict[str, Any],
    designs: dict[str, Any],
    notes: list[str],
) -> dict[str, Any]:
    per_round: list[dict[str, dict]] = []  # round -> design -> figure -> value
    for current in rounds:
        values = {key: figures(current[key]["phases"]) for key in DESIGNS if key in current}
        if "floor" in current:
            values["floor"] = figures(current["floor"]["phases"])
            values["floor"]["send_cpu_ms"] = values["floor"]["floor_cpu_ms"]
        per_round.append(values)

    medians: dict[str, dict[str, Any]] = {}
    for key in (*DESIGNS, "floor"):
        if not any(key in r for r in per_round):
            continue
        medians[key] = {
            figure: {
                "rounds": [r.get(key, {}).get(figure) for r in per_round],
                "median": _median([r.get(key, {}).get(figure) for r in per_round]),
            }
            for figure in FIGURES
        }
        medians[key]["components_ms_per_op"] = {
            phase: _median_components(
                [components(r[key]["phases"], phase) for r in rounds if key in r]
            )
            for phase in ("send", "poll_ack", "broadcast", "floor")
        }

    targets = []
    for figure, ours, reference, limit in TARGETS:
        ratios = []
        for values in per_round:
            mine, theirs = values.get(ours, {}).get(figure), values.get(reference, {}).get(figure)
            ratios.append(round(mine / theirs, 3) if mine and theirs else None)
        median = _median(ratios)
        targets.append(
            {
                "figure": figure,
                "ours": ours,
                "reference": reference,
                "target": f"<= {limit} x",
                "ratios_by_round": ratios,
                "median_ratio": median,
                "met": None if median is None else median <= limit,
            }
        )

    checks = {
        key: _sum_checks([r[key]["checks"] for r in rounds if key in r and r[key].get("checks")])
        for key in DESIGNS
        if any(key in r for r in rounds)
    }
    for key, c in checks.items():
        targets.append(
            {
                "figure": "lost + duplicated + cross_delivered",
                "ours": key,
                "reference": None,
                "target": "0",
                "value": c["lost"] + c["duplicated"] + c["cross_delivered"],
                "met": c["lost"] + c["duplicated"] + c["cross_delivered"] == 0,
            }
        )

    return {
        "designs": designs,
        "notes": notes,
        "medians": medians,
        "targets": targets,
        "checks": checks,
        "rounds": [
            {
                "round": current["round"],
                **{
                    key: {
                        "loadavg_at_start": current[key].get("loadavg_at_start"),
                        "phases": {n: p.as_json() for n, p in current[key]["phases"].items()},
                        "checks": current[key].get("checks"),
                    }
                    for key in (*DESIGNS, "floor")
                    if key in current
                },
            }
            for current in rounds
        ],
        "config": config,
        "environment": environment,
    }


def _median_components(samples: list[dict[str, float] | None]) -> dict[str, float] | None:
    present = [s for s in samples if s]
    if not present:
        return None
    return {c: _median([s[c] for s in present]) for c in COMPONENTS}


def _sum_checks(all_checks: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("expected", "received", "lost", "duplicated", "cross_delivered", "unexpected")
    keys += ("failed_sends", "failed_acks", "undrained_agents")
    out: dict[str, Any] = {k: sum(c[k] for c in all_checks) for k in keys}
    out["examples"] = [c["examples"] for c in all_checks if c["lost"] or c["failed_sends"]][:2]
    return out


def checks_failed(summary: dict[str, Any]) -> bool:
    """Hikyaku lost, duplicated or cross-delivered something (the old broker's are reported)."""
    return any(
        c["lost"] or c["duplicated"] or c["cross_delivered"]
        for key, c in summary["checks"].items()
        if not key.startswith("old")
    )


def history_line(summary: dict[str, Any]) -> dict[str, Any]:
    env = summary["environment"]
    return {
        "finished_at": summary["finished_at"],
        "git_commit": env.get("git_commit"),
        "loadavg_at_start": env.get("loadavg_at_start"),
        "loadavg_at_end": summary.get("loadavg_at_end"),
        "rounds": len(summary["rounds"]),
        "medians": {
            key: {f: v["median"] for f, v in figs.items() if f in FIGURES}
            for key, figs in summary["medians"].items()
        },
        "targets": [
            {k: t.get(k) for k in ("figure", "ours", "reference", "median_ratio", "value", "met")}
            for t in summary["targets"]
        ],
    }


def _fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def table(summary: dict[str, Any]) -> str:
    med = summary["medians"]
    rounds = len(summary["rounds"])

    def value(key: str, figure: str) -> float | None:
        return med.get(key, {}).get(figure, {}).get("median")

    def ratio(ours: str, figure: str, reference: str) -> str:
        for t in summary["targets"]:
            if (t["figure"], t["ours"], t["reference"]) == (figure, ours, reference):
                return _fmt(t["median_ratio"])
        mine, theirs = value(ours, figure), value(reference, figure)
        return _fmt(mine / theirs) if mine and theirs else "—"

    head = f"{'median of ' + str(rounds) + ' rounds':<44}{'ours 0.3':>9}{'ours 1.0':>9}{'old':>8}"
    head += f"{'0.3/old':>9}{'1.0/old':>9}{'target':>9}"
    lines = [head, "-" * len(head)]
    limits = {(f, o, r): limit for f, o, r, limit in TARGETS}
    for figure in ("send_cpu_ms", "poll_ack_cpu_ms", "broadcast_cpu_ms", "send_p50_ms"):
        lines.append(_row(figure, value, ratio, limits))
    lines.append(_row("send_p99_ms", value, ratio, limits))
    lines.append(_row("sends_per_s", value, ratio, limits, digits=0))
    floor = value("floor", "floor_cpu_ms")
    lines.append(f"{FIGURES['floor_cpu_ms']:<44}{_fmt(floor):>9}")
    lines.append(
        f"{'send / floor':<44}{ratio('hikyaku-0.3', 'send_cpu_ms', 'floor'):>9}"
        f"{ratio('hikyaku-1.0', 'send_cpu_ms', 'floor'):>9}{'':>26}{'≤ 2.0×':>9}"
    )
    if "embedded-1.0" in med:
        lines.append("")
        lines.append(
            f"{'embedded default (make run), 1.0 path':<44}{'embedded':>9}{'/ ours 1.0':>11}"
        )
        for figure in ("send_cpu_ms", "poll_ack_cpu_ms", "send_p50_ms", "send_p99_ms"):
            target = "≤ 1.5×"
            lines.append(
                f"{FIGURES[figure]:<44}{_fmt(value('embedded-1.0', figure)):>9}"
                f"{ratio('embedded-1.0', figure, 'hikyaku-1.0'):>11}{target:>9}"
            )
        per_s = value("embedded-1.0", "sends_per_s")
        lines.append(f"{FIGURES['sends_per_s']:<44}{_fmt(per_s, 0):>9}")
    lines.append("")
    lines.append("ratios by round (ours / old, within the round):")
    for t in summary["targets"]:
        if t.get("reference") and t["ratios_by_round"]:
            rs = ", ".join(_fmt(r) for r in t["ratios_by_round"])
            lines.append(f"  {t['figure']:<18}{t['ours']:<14} / {t['reference']:<12} {rs}")
    lines.append("")
    lines.append("server CPU ms per op by component (medians): web + pg + pg-sh + redis")
    for key in (*DESIGNS, "floor"):
        for phase, comp in (med.get(key, {}).get("components_ms_per_op") or {}).items():
            if comp:
                parts = " + ".join(_fmt(comp[c]) for c in COMPONENTS)
                lines.append(f"  {key:<14}{phase:<10}{parts}")
    lines.append("")
    for key, c in summary["checks"].items():
        lines.append(
            f"checks {key}: expected {c['expected']}, received {c['received']}, lost {c['lost']}, "
            f"duplicated {c['duplicated']}, cross-delivered {c['cross_delivered']}, failed sends "
            f"{c['failed_sends']}, failed acks {c['failed_acks']}"
        )
    queries = summary.get("queries_per_op") or {}
    if queries and "error" not in queries:
        lines.append(
            "Hikyaku's SQL statements per request and in-process CPU ms (bench/queries.py): "
            + ", ".join(
                f"{name} {q['queries']} / {q['median_cpu_ms_in_process']:.2f}"
                for name, q in queries.items()
            )
        )
    lines.append("targets (issue 13; median of the rounds' ratios):")
    for t in summary["targets"]:
        mark = {True: "met", False: "MISSED", None: "not measured"}[t["met"]]
        if t.get("reference"):
            what = f"{t['figure']} {t['ours']} / {t['reference']}"
            lines.append(f"  {what:<48}{_fmt(t['median_ratio']):>7}  {t['target']:<9}{mark}")
        else:
            what = f"{t['figure']} {t['ours']}"
            lines.append(f"  {what:<48}{t['value']:>7}  {t['target']:<9}{mark}")
    for note in summary.get("notes") or []:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def _row(figure: str, value, ratio, limits, digits: int = 2) -> str:
    limit = limits.get((figure, "hikyaku-1.0", "old-0.3"))
    return (
        f"{FIGURES[figure]:<44}{_fmt(value('hikyaku-0.3', figure), digits):>9}"
        f"{_fmt(value('hikyaku-1.0', figure), digits):>9}{_fmt(value('old-0.3', figure), digits):>8}"
        f"{ratio('hikyaku-0.3', figure, 'old-0.3'):>9}{ratio('hikyaku-1.0', figure, 'old-0.3'):>9}"
        f"{('≤ ' + str(limit) + '×') if limit else '':>9}"
    )


def markdown(summary: dict[str, Any]) -> str:
    """The README's side-by-side table: `python -m bench.report [bench/results/latest.json]`."""
    med, targets = summary["medians"], summary["targets"]
    limits = {(f, o, r): limit for f, o, r, limit in TARGETS}

    def value(key: str, figure: str, digits: int = 2) -> str:
        return _fmt(med.get(key, {}).get(figure, {}).get("median"), digits)

    def judged(figure: str, ours: str, reference: str) -> str:
        for t in targets:
            if (t["figure"], t["ours"], t["reference"]) == (figure, ours, reference):
                ratios = "/".join(_fmt(r) for r in t["ratios_by_round"])
                mark = {True: "met", False: "**missed**", None: "not measured"}[t["met"]]
                return f"{_fmt(t['median_ratio'])}× ({ratios}) {mark}"
        mine = med.get(ours, {}).get(figure, {}).get("median")
        theirs = med.get(reference, {}).get(figure, {}).get("median")
        return f"{_fmt(mine / theirs)}×" if mine and theirs else "—"

    lines = [
        "| median of the rounds | Hikyaku, 0.3 path | Hikyaku, 1.0 path | old broker "
        "| 0.3 / old (by round) | 1.0 / old (by round) | target |",
        "|---|---|---|---|---|---|---|",
    ]
    for figure in ("send_cpu_ms", "poll_ack_cpu_ms", "broadcast_cpu_ms", "send_p50_ms"):
        lines.append(_md_row(figure, value, judged, limits))
    lines.append(_md_row("send_p99_ms", value, judged, limits))
    lines.append(_md_row("sends_per_s", value, judged, limits, digits=0))
    lines.append(
        f"| send / floor ({value('floor', 'floor_cpu_ms')} ms) "
        f"| {judged('send_cpu_ms', 'hikyaku-0.3', 'floor')} "
        f"| {judged('send_cpu_ms', 'hikyaku-1.0', 'floor')} | | | | ≤ 2.0× |"
    )
    lost = " | ".join(
        "{lost}/{duplicated}/{cross_delivered}".format(**summary["checks"][k])
        if k in summary["checks"]
        else "—"
        for k in ("hikyaku-0.3", "hikyaku-1.0", "old-0.3")
    )
    lines.append(f"| lost/duplicated/cross-delivered | {lost} | | | 0 |")
    if "embedded-1.0" in med:
        lines += [
            "",
            "| embedded default (`make run`), 1.0 path | embedded | production (1.0 path) "
            "| embedded / production (by round) | target |",
            "|---|---|---|---|---|",
        ]
        for figure in ("send_cpu_ms", "poll_ack_cpu_ms", "send_p50_ms", "send_p99_ms"):
            lines.append(
                f"| {FIGURES[figure]} | {value('embedded-1.0', figure)} "
                f"| {value('hikyaku-1.0', figure)} "
                f"| {judged(figure, 'embedded-1.0', 'hikyaku-1.0')} | ≤ 1.5× |"
            )
        lines.append(
            f"| {FIGURES['sends_per_s']} | {value('embedded-1.0', 'sends_per_s', 0)} "
            f"| {value('hikyaku-1.0', 'sends_per_s', 0)} | | |"
        )
    return "\n".join(lines)


def _md_row(figure: str, value, judged, limits, digits: int = 2) -> str:
    limit = limits.get((figure, "hikyaku-1.0", "old-0.3"))
    return (
        f"| {FIGURES[figure]} | {value('hikyaku-0.3', figure, digits)} "
        f"| {value('hikyaku-1.0', figure, digits)} | {value('old-0.3', figure, digits)} "
        f"| {judged(figure, 'hikyaku-0.3', 'old-0.3')} | {judged(figure, 'hikyaku-1.0', 'old-0.3')} "
        f"| {('≤ ' + str(limit) + '×') if limit else ''} |"
    )


if __name__ == "__main__":
    import json
    import sys
    from pathlib import Path

    path = Path(
        sys.argv[1] if len(sys.argv) > 1 else Path(__file__).with_name("results") / "latest.json"
    )
    print(markdown(json.loads(path.read_text())))
